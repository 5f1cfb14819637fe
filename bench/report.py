"""Turn benchmark JSON (bench/results/*.json) into bench/RESULTS.md and PNG plots.

    .venv/bin/python bench/report.py            # after bench/run.py (or the scripts) wrote JSON

Reads, when present: engine_cpu.json (bench/engine.py), sampling_cpu.json (bench/sampling.py),
cluster_overhead_cpu.json, http_overhead_cpu.json (bench/http_overhead.py), scheduler_sim.json
(bench/scheduler_sim.py), peers_*.json (bench/peers.py), gguf_real_cpu.json
(bench/gguf_real.py), kv_quant_cpu.json (bench/kv_quant.py), gpu_h200_pipelined.json,
gpu_h200_qwen3_1b.json and engine_default_h200.json (bench/gpu.py and bench/engine.py on the lent GPU). Missing files are
skipped with a note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
REPORT = Path(__file__).parent / "RESULTS.md"


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def section(module: str, name: str) -> Any:
    """A section writer from a sibling report module (bench.X as a package, X when this file
    runs as a script with bench/ itself on sys.path)."""
    import importlib

    try:
        return getattr(importlib.import_module(f"bench.{module}"), name)
    except ImportError:
        return getattr(importlib.import_module(module), name)


def plot_batch(data: dict, temp: str, title: str, png: str) -> str:
    rows = data["batch"][temp]
    bs = sorted(rows, key=int)
    series = {name: [rows[b][name]["tokens_per_s"] for b in bs] for name in rows[bs[0]]}
    return plot_lines([int(b) for b in bs], series, "batch size", "tokens/s", title, png, logx=True)


def plot_lines(
    xs: list,
    series: dict[str, list],
    xlabel: str,
    ylabel: str,
    title: str,
    png: str,
    logx: bool = False,
) -> str:  # noqa: E501
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in series.items():
        ax.plot(xs[: len(ys)], ys, "o-", label=name)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / png, dpi=110)
    plt.close(fig)
    return png


def batch_table(data: dict, temp: str) -> list[str]:
    rows = data["batch"][temp]
    bs = sorted(rows, key=int)
    names = list(rows[bs[0]])
    out = ["| config | " + " | ".join(f"B={b}" for b in bs) + " |", "|---" * (len(bs) + 1) + "|"]
    for n in names:
        cells = []
        for b in bs:
            r = rows[b][n]
            cell = f"{r['tokens_per_s']:.0f} ({r['speedup_vs_mlx_lm']:.2f}x"
            cell += f", len {r['mean_acceptance_length']:.2f})" if "rounds" in r else ")"
            cells.append(cell)
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return out


def engine_section(data: dict, label: str, stem: str) -> list[str]:
    lines = [f"### {label}", "", f"Model: `{data['model']}`; machine: {data['machine']}; "
             f"{data['max_tokens']} new tokens per request; draft depth {data['draft_depth']}.",
             "Cells: tokens/s (ratio to mlx-lm BatchGenerator in the same run, mean acceptance "
             "length)." + (f" {data['note']}" if data.get("note") else ""), ""]  # fmt: skip
    for temp in data["batch"]:
        lines += [f"**{temp}**", "", *batch_table(data, temp), ""]
        png = plot_batch(data, temp, f"{label} {temp}", f"{stem}_{temp.replace('=', '')}.png")
        lines += [f"![{label} {temp}](results/{png})", ""]
    greedy = data["batch"].get("T=0.0")
    if greedy:
        bs = sorted(greedy, key=int)
        series = {
            name: greedy[bs[-1]][name].get("acceptance_per_position", [])
            for name in greedy[bs[-1]]
            if greedy[bs[-1]][name].get("acceptance_per_position")
        }
        if series:
            depth = max(len(v) for v in series.values())
            png = plot_lines(list(range(1, depth + 1)), series, "draft position", "accepted fraction",
                             f"{label}: acceptance by position (B={bs[-1]})", f"{stem}_accept_pos.png")  # fmt: skip
            lines += [f"![acceptance by position](results/{png})", ""]
    ctx = data.get("context_scaling")
    if ctx:
        lines += ["Round time vs context (B=4, draft model): compaction is a length update, a "
                  "roll-style compaction (mlx-vlm) gathers every slot of every layer:", "",
                  "| context | verify ms | draft ms | compaction ms | roll compaction ms |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for c, r in ctx.items():
            lines.append(
                f"| {c} | {r['verify_round_ms']:.2f} | {r['draft_ms']:.2f} | "
                f"{r['compact_ms']:.3f} | {r['roll_compaction_ms']:.2f} |"
            )
        lines.append("")
    return lines


SIM_PATHS = {
    "in_process": "in-process",
    "gateway": "gateway, unary Submit",
    "gateway_batch": "gateway, SubmitBatch",
}


def scheduler_sim_section(data: dict) -> list[str]:
    """bench/scheduler_sim.py: scheduler cost against fleet size, before and after issue 16."""
    runs = [label for label in ("before", "after") if label in data]
    if not runs:
        return ["(no before/after runs)", ""]
    ref = data[runs[-1]]
    ws = sorted({int(w) for label in runs for w in data[label]["rows"]})
    lines = [f"Real `Scheduler`, simulated workers of {ref['slots_per_worker']} slots answering "
             "at once (16-token prompts, 16 new tokens), `bench/scheduler_sim.py`; machine: "
             f"{ref['machine']}, 1-minute load average {ref['load_average_end'][0]:.1f} at the "
             "end: shared with other jobs, so req/s is noisy; CPU per request is steadier. "
             "`before` is the code before issue 16 and `after` this branch, run alternately "
             f"per worker count with the same script. In-process: median of {ref['median_of']} "
             f"runs of {ref['requests']} requests, 256 in flight; gateway: "
             f"{ref['gateway_requests']} unary Submit calls, "
             f"{ref['gateway_concurrency_per_client']} in flight from a client process; "
             f"SubmitBatch: {ref['requests']} requests in calls of {ref['gateway_batch_chunk']}, "
             f"{ref['gateway_batch_calls_in_flight']} calls in flight. Scheduler CPU: in-process, "
             "the loop thread's CPU minus the driver's and the simulated workers'; gateway, the "
             "CPU inside the scheduler's methods; server CPU: the whole gateway process.", "",
             "| workers | path | run | req/s | scheduler CPU µs/req | server CPU µs/req | "
             "p50 ms | p99 ms |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for w in ws:
        for key, name in SIM_PATHS.items():
            for label in runs:
                r = data[label]["rows"].get(str(w), {}).get(key)
                if r is None:
                    continue
                server = r.get("server_cpu_us_per_req")
                lines.append(
                    f"| {w} | {name} | {label} | {r['req_per_s']:,.0f} | "
                    f"{r['scheduler_cpu_us_per_req']:.0f} | "
                    f"{'' if server is None else f'{server:.0f}'} | {r['p50_ms']:.1f} | "
                    f"{r['p99_ms']:.1f} |"
                )
    series: dict[str, list] = {}
    cpu: dict[str, list] = {}
    for label in runs:
        rows = data[label]["rows"]
        for key, name in SIM_PATHS.items():
            ys = [rows.get(str(w), {}).get(key) for w in ws]
            if all(y is not None for y in ys):
                series[f"{name} ({label})"] = [y["req_per_s"] for y in ys]
                cpu[f"{name} ({label})"] = [y["scheduler_cpu_us_per_req"] for y in ys]
    png = plot_lines(ws, series, "workers", "requests/s", "Scheduler throughput vs fleet size",
                     "scheduler_sim_rps.png", logx=True)  # fmt: skip
    png2 = plot_lines(ws, cpu, "workers", "scheduler CPU µs per request",
                      "Scheduler cost per request vs fleet size", "scheduler_sim_cpu.png",
                      logx=True)  # fmt: skip
    lines += ["", f"![scheduler req/s](results/{png})", "", f"![scheduler CPU](results/{png2})", ""]
    after = data.get("after", {}).get("rows", {})
    if "8" in after and "256" in after:
        a8, a256 = after["8"]["in_process"], after["256"]["in_process"]
        lines += [f"After, in-process: {a256['req_per_s']:,.0f} req/s at 256 workers = "
                  f"{a256['req_per_s'] / a8['req_per_s']:.2f}x the 8-worker figure "
                  f"({a8['req_per_s']:,.0f}); CPU per request {a256['scheduler_cpu_us_per_req']:.0f}"
                  f" vs {a8['scheduler_cpu_us_per_req']:.0f} µs.", ""]  # fmt: skip
    return lines


def http_section(data: dict | None) -> list[str]:
    """bench/http_overhead.py: OpenAI HTTP vs gRPC gateway vs in-process, one run."""
    if not data:
        return []
    out = ["## HTTP API overhead (OpenAI HTTP vs gRPC gateway vs in-process, CPU)", "",
           f"{data['workload']}; {data['model']}, drafter {data['drafter']} depth "
           f"{data['draft_depth']}; {data['machine']}. HTTP clients are the official `openai` "
           "SDK in 16 threads of the benchmark process, on the same 2 cores as the worker.", "",
           "| path | tokens/s | vs gRPC gateway | vs in-process |", "|---|---|---|---|"]  # fmt: skip
    r = data["tokens_per_s"]
    for name in r:
        out.append(f"| {name} | {r[name]:.0f} | {r[name] / r['grpc_gateway']:.2f}x | "
                   f"{r[name] / r['in_process']:.2f}x |")  # fmt: skip
    times = data.get("round_times_s", {})
    if times:
        out += ["", "Per-round seconds (interleaved): " + "; ".join(
            f"{k} {', '.join(f'{x:.2f}' for x in v)}" for k, v in times.items()) + "."]  # fmt: skip
    out += ["", f"Identical greedy tokens: gRPC vs in-process "
            f"{data['identical_tokens_grpc_vs_in_process']}, HTTP vs in-process "
            f"{data['identical_tokens_http_vs_in_process']}; SSE text vs gRPC "
            f"{data['identical_text_sse_vs_grpc']}.", ""]  # fmt: skip
    return out


def main() -> None:
    out = ["# specfleet benchmark results", "",
           "Generated by `bench/report.py` from the JSON in `bench/results/` (see `bench/run.py`).",
           "",
           "Machines: CPU runs on a 2-core x86_64 Linux VM (the CI class), MLX 0.32.4 CPU backend "
           "with Debian's OpenBLAS preloaded (`LD_PRELOAD`, one BLAS thread per process: `OPENBLAS_NUM_THREADS=1`), or BLIS where a result says so (as `./run demo` now does), other jobs "
           "sharing the cores; GPU runs on one NVIDIA H200 with MLX's CUDA build (mlx-cuda-13 "
           "0.32.4). Ratios compare runs made in the same process on the same prompts.",
           ""]  # fmt: skip
    out += section("report_targets", "targets_section")()
    cpu = load("engine_cpu.json")
    out += ["## Engine on CPU (embedded default model)", ""]
    out += engine_section(cpu, "CPU", "engine_cpu") if cpu else ["(not run)", ""]
    samp = load("sampling_cpu.json")
    if samp:
        out += ["## Sampled acceptance on CPU", "", "```json", json.dumps(samp, indent=1)[:6000],
                "```", ""]  # fmt: skip
    clus = load("cluster_overhead_cpu.json")
    if clus:
        out += ["## Cluster overhead (gateway path vs in-process engine, CPU)", ""]
        out += [
            f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}" for k, v in clus.items()
        ]
        out.append("")
    out += http_section(load("http_overhead_cpu.json"))
    for path in sorted(RESULTS.glob("peers_*.json")):
        stem = path.stem
        out += [f"## Peers on a Qwen3.5-shape model ({stem.split('_', 1)[1]})", ""]
        out += section("report_peers", "peers_section")(
            json.loads(path.read_text()), stem, plot_lines
        )
    trained = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("peers_h200_trained*.json"))]
    out += section("report_peers", "trained_peer_summary")(trained, load("graph_ops_h200.json"))
    pairs = [json.loads(p.read_text()) for p in sorted(RESULTS.rglob("p5_*.json"))]
    out += section("report_peers", "p5_pairs_section")(pairs)
    sim = load("scheduler_sim.json")
    if sim:
        out += ["## Scheduler cost vs fleet size (simulated workers, CPU)", ""]
        out += scheduler_sim_section(sim)
    greal = load("gguf_real_cpu.json")
    if greal:
        out += ["## A real GGUF checkpoint, kept quantized vs dequantized (CPU)", ""]
        out += section("report_gguf", "gguf_real_section")(greal)
    kvq = load("kv_quant_cpu.json")
    if kvq:
        out += ["## Quantized KV cache (kv_bits), CPU", ""]
        out += section("report_kv_quant", "kv_quant_section")(kvq)
    gpu = load("gpu_h200_qwen3_1b.json")
    if gpu:
        out += ["## GPU: random ~1B Qwen3 (bf16), MLX CUDA build", "",
                f"Device: {gpu['device']} (NVIDIA H200); {gpu['model']}; {gpu['max_tokens']} new "
                f"tokens; depth {gpu['draft_depth']}. Forced acceptance = a drafter proposing "
                "exactly what the target says (every draft accepted): the throughput ceiling.", "",
                "| B | engine plain | mlx-lm BatchGenerator | engine forced-accept | speedup | "
                "verify(K+1) / decode(1) time |", "|---|---|---|---|---|---|"]  # fmt: skip
        bs = sorted(gpu["rows"], key=int)
        for b in bs:
            r = gpu["rows"][b]
            out.append(
                f"| {b} | {r['engine_plain_tokens_per_s']:.0f} | "
                f"{r['mlx_lm_batch_generator_tokens_per_s']:.0f} | "
                f"{r['engine_forced_accept_tokens_per_s']:.0f} | "
                f"{r['engine_forced_accept_tokens_per_s'] / r['engine_plain_tokens_per_s']:.2f}x | "
                f"{r['verify_over_decode_time']:.2f} |"
            )
        series = {
            k: [gpu["rows"][b][k] for b in bs]
            for k in (
                "engine_plain_tokens_per_s",
                "mlx_lm_batch_generator_tokens_per_s",
                "engine_forced_accept_tokens_per_s",
            )  # fmt: skip
        }
        png = plot_lines([int(b) for b in bs], series, "batch size", "tokens/s",
                         "H200, random 1B Qwen3", "gpu_qwen3_1b.png", logx=True)  # fmt: skip
        out += ["", f"![gpu](results/{png})", ""]
    out += section("report_speed", "speed_section")(
        cpu, load("engine_real_cpu.json"), load("engine_default_h200.json"),
        [json.loads(p.read_text()) for p in sorted(RESULTS.glob("gpu_h200_pipelined*.json"))],
        plot_lines,
        [json.loads(p.read_text()) for p in sorted(RESULTS.glob("lone_row_step_*.json"))],
        load("ragged_attention_h200.json"), load("ragged_route_h200.json"),
        load("ragged_window_ab_h200.json"), [json.loads(p.read_text()) for p in sorted(RESULTS.glob("skinny_matmul*_h200.json"))],
        load("matmul_forms_h200.json"),
    )  # fmt: skip
    out += section("report_demo", "demo_section")()
    out += section("report_demo", "stream_bound_section")()
    gdef = load("engine_default_h200.json")
    if gdef:
        out += ["## GPU: embedded default model (H200)", ""]
        out += engine_section(gdef, "H200", "engine_h200")
    REPORT.write_text("\n".join(out) + "\n")
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
