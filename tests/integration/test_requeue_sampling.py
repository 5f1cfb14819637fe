"""A seeded, penalised sampled request requeued half way (its worker stream broken) finishes
token-identical to the uninterrupted run: the scheduler's resumed attempt says how much of its
prompt is earlier output (SamplingParams.num_resumed_tokens), so presence_penalty still counts
those tokens as output. Scheduler + gRPC link + a real worker server on loopback with a real
tiny MLX engine (model drafter, coupled acceptance); the reference is the same engine run
directly, in one go."""

from __future__ import annotations

import asyncio

import pytest

from cluster.requests import GenerateInput
from tests.cluster.test_scheduler import Harness, collect
from tests.tiny import mixed_prompts
from tests.workers.service.real_engine import make_engine, make_slow_engine
from workers.types import SamplingParams

N = 32
pytestmark = pytest.mark.timeout(120)


def test_penalised_sampling_survives_a_requeue_at_half_way() -> None:
    params = SamplingParams(
        max_tokens=N,
        temperature=0.9,
        seed=7,
        repetition_penalty=1.3,
        presence_penalty=1.5,
        acceptance="coupled",
        ignore_eos=True,
    )
    prompts = mixed_prompts(4, seed=5, lengths=[2, 7, 13, 30])
    want = [o.tokens for o in make_engine().generate(prompts, params)]

    async def main() -> None:
        async with Harness(n=1, make_engine=lambda: make_slow_engine(0.05)) as h:
            states = [h.sched.submit(GenerateInput(prompt=p, params=params)) for p in prompts]
            tasks = [asyncio.create_task(collect(s)) for s in states]
            for _ in range(2000):
                if all(len(s.tokens) >= N // 2 for s in states):
                    break
                await asyncio.sleep(0.005)
            done = [len(s.tokens) for s in states]
            assert all(N // 2 <= n < N for n in done), f"not half way when broken: {done}"
            h.links[0].break_stream()
            results = await asyncio.gather(*tasks)
            assert [r[0] for r in results] == want, "resumed attempts equal the no-fault run"
            assert all(r[1].usage.requeues == 1 for r in results)

    asyncio.run(main())
