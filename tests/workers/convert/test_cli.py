"""`specfleet convert FILE.gguf OUT_DIR`, then serving the result: Engine.load with each drafter
(and the worker's EngineSpec) decodes as mlx-lm decodes the same converted, quantized model."""

from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter
from mlx_lm import load

from cluster.cli import main
from tests.tiny import perturbed, reference_greedy
from tests.workers.convert.gguf_files import hf_tokenizer, tiny_family_model, write_gguf
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.service.engine_spec import EngineSpec

PROMPTS = ["def add(a, b):", "The quick brown fox", "x", "It's 2024 🦊"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A Q4_0 llama target and a Q8_0 draft of it, converted by the CLI."""
    root = tmp_path_factory.mktemp("gguf")
    tok = hf_tokenizer("smollm")
    target = tiny_family_model("llama")
    write_gguf(root / "target.gguf", target, "llama", QT.Q4_0, tok, "smollm")
    write_gguf(root / "draft.gguf", perturbed(target, 0.3), "llama", QT.Q8_0, tok, "smollm")
    for name in ("target", "draft"):
        assert main(["convert", str(root / f"{name}.gguf"), str(root / name)]) == 0
    return root


def test_cli_prints_what_it_kept(converted, capsys, tmp_path):
    assert main(["convert", str(converted / "target.gguf"), str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "15 tensors Q4_0 kept (4-bit, group 32)" in out and "llama" in out


@pytest.mark.parametrize("drafter", [None, "ngram", "model"])
def test_engine_load_serves_the_converted_model(converted, drafter):
    spec = f"model:{converted / 'draft'}" if drafter == "model" else drafter
    engine = Engine.load(converted / "target", drafter=spec, draft_depth=3, max_batch_size=4)
    reference_model, tokenizer = load(str(converted / "target"))  # still quantized
    outs = engine.generate(PROMPTS, SamplingParams(max_tokens=12, ignore_eos=True))
    for prompt, out in zip(PROMPTS, outs):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        ref = reference_greedy(reference_model, ids, 12)
        assert_matches(out.tokens, ref, f"{drafter}: {prompt!r}")
    if drafter == "model":
        stats = engine.take_round_stats()
        assert sum(s.num_accepted_tokens for s in stats) > 0


def test_worker_spec_builds_it(converted):
    engine = EngineSpec(model=str(converted / "target"), drafter="ngram").build()
    assert engine.info().model_id == "target"
    assert engine.tokenizer.encode("It's 2024", add_special_tokens=False)


def test_bad_input_names_the_value_and_writes_nothing(converted, tmp_path, capsys):
    assert main(["convert", str(tmp_path / "missing.gguf"), str(tmp_path / "a")]) == 2
    assert "missing.gguf" in capsys.readouterr().err and not (tmp_path / "a").exists()
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all" * 10)
    assert main(["convert", str(tmp_path / "junk.gguf"), str(tmp_path / "b")]) == 2
    assert "is not a readable GGUF file" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    assert main(["convert", str(converted / "target.gguf"), str(converted / "draft")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    w = GGUFWriter(str(tmp_path / "gemma.gguf"), "gemma")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert main(["convert", str(tmp_path / "gemma.gguf"), str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "general.architecture='gemma' is not supported" in err
    assert not (tmp_path / "c").exists()
    model, tok = tiny_family_model("llama"), hf_tokenizer("qwen2")
    write_gguf(tmp_path / "tekken.gguf", model, "llama", QT.F32, tok, "tekken")
    assert main(["convert", str(tmp_path / "tekken.gguf"), str(tmp_path / "d")]) == 2
    assert "tokenizer.ggml.pre='tekken' is not supported" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_keep_quantized_flag_reaches_the_engine_config():
    import argparse

    from workers.service.engine_spec import add_engine_args

    p = argparse.ArgumentParser()
    add_engine_args(p)
    assert EngineSpec.from_args(p.parse_args(["--keep-quantized"])).config.keep_quantized
    assert not EngineSpec.from_args(p.parse_args([])).config.keep_quantized


def test_engine_load_keep_quantized_keeps_target_and_draft_quantized(converted):
    from workers.loading import quantized_layers

    engine = Engine.load(
        converted / "target", drafter=f"model:{converted / 'draft'}", keep_quantized=True
    )
    assert quantized_layers(engine.model) and quantized_layers(engine.drafter.model)


def test_scheduler_tokenizer_reads_the_converted_directory(converted):
    """`specfleet up --model OUT_DIR`: the mlx-free scheduler tokenizer encodes as the engine's
    does, renders the GGUF's chat template and stops at its EOS."""
    from cluster.tokenizer import TextTokenizer

    text = TextTokenizer(converted / "target")
    _, engine_tok = load(str(converted / "target"))
    for prompt in PROMPTS:
        assert text.encode(prompt) == engine_tok.encode(prompt, add_special_tokens=False)
        assert text.decode(text.encode(prompt)) == prompt
    chat = text.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert text.eos_token_ids == [text.encode("<|im_end|>")[0]]
