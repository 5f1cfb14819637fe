"""Round costs (workers/round_costs.py): a size's cost never above a larger batch's cell of its
depth, and the job's-end choice that follows from it on costs an H200 measured."""

from __future__ import annotations

import numpy as np

from workers.drain import DrainingRows, JobCosts, job_depth
from workers.round_costs import cost_cell, cost_table


def test_a_size_costs_no_more_than_a_larger_batch_at_its_depth_or_deeper():
    cells = {(16, 0): 0.0020, (16, 3): 0.0030, (13, 3): 0.0099, (4, 0): 0.0015, (4, 3): 0.0025}
    first = {(12, 3): 0.0075}  # seen once: its build round
    sizes = [13, 12, 4, 2, 16, 32]
    table = cost_table(cells, first, sizes, 3, cap_by_larger=True)
    at = dict(zip(sizes, table))
    assert at[13][3] == 0.0030  # its own median (a build in it) capped by 16's
    assert at[12][3] == 0.0030  # its first round alone, capped
    assert at[13][0] <= 0.0020 and at[12][0] <= 0.0020  # fitted, capped by 16's
    assert at[4][0] == 0.0015 and at[4][3] == 0.0025  # cheaper than any larger: its own
    assert at[2][3] <= 0.0025  # capped by 4's, the cheapest above it
    assert at[13][1] <= 0.0030 and at[13][2] <= 0.0030  # no cells at 1-2: 16's depth 3 caps
    assert at[16][0] == 0.0020 and at[16][3] == 0.0030  # the largest: its own cells
    # Past the largest cell nothing caps: the fit (or the floor) decides.
    assert at[32][3] > 0.0030


def test_a_lone_last_row_drafts_on_the_h200_trace_costs():
    """Costs the depth policy held on an H200 (trained hybrid, 16 rows, 64 prompts of 48-144
    tokens; bench/results/s35, B=16 rep1 round 272): depth 3 at 2.93 ms a round for 16 rows
    against 2.19 ms plain, acceptance 0.8 / 0.77 / 0.77 (2.8 tokens a row a round). One row
    at depth 2, its shape's build (12.4 ms), had set what one row costs at depth 3, and the
    draining sizes read 4-10 ms from builds and few rounds. A job whose last row runs alone
    for long then decodes it plainly; capped by larger batches' cells, it drafts."""
    c0 = [2.42, 2.61, 3.56, 2.85, 3.06, 3.75, 2.61, 2.43, 1.85, 1.86, 2.78, 2.22, 2.14, 1.88,
          1.68, 2.19]  # fmt: skip
    c3 = [4.73, 5.21, 5.23, 5.26, 5.28, 5.31, 5.33, 5.36, 5.38, 4.02, 5.43, 9.89, 5.48, 5.5,
          2.93]  # sizes 2-16 (size 1 has no depth-3 cell)  # fmt: skip
    cells = {(b + 1, 0): t / 1e3 for b, t in enumerate(c0)}
    cells |= {(b + 2, 3): t / 1e3 for b, t in enumerate(c3)}
    first = {(1, 2): 12.43e-3}
    drain = DrainingRows(remaining=np.array([140.0] + [8.0] * 15), drafted=np.full(16, 60.0),
                         accepted=np.full(16, 47.0))  # fmt: skip

    capped = cost_table(cells, first, range(17), 3, cap_by_larger=True)
    assert (np.diff(capped[1:], axis=1) >= 0).all()  # no depth cheaper than a shallower one

    def depth(cap: bool) -> int:
        job = JobCosts(costs=cost_table(cells, first, range(17), 3, cap),
                       acceptance=np.array([0.8, 0.77, 0.77]), reference=0.78,
                       row_rates=np.zeros(0), prior=24.0, once=np.zeros(4),
                       margin=np.full(4, 0.1), depths=[0, 3])  # fmt: skip
        return job_depth(drain, job)

    assert depth(cap=False) == 0  # one row at depth 3 read as 12.4 ms: 5x a plain round
    assert depth(cap=True) == 3


def test_the_cell_that_prices_a_capped_cost_is_the_one_that_caps_it():
    cells = {(16, 0): 0.0020, (16, 3): 0.0030, (13, 3): 0.0099, (4, 0): 0.0015, (4, 3): 0.0025}
    sizes = [13, 4, 2]
    at = dict(zip(sizes, cost_table(cells, {}, sizes, 3, cap_by_larger=True)))
    assert cost_cell(cells, 13, 3, at[13][3]) == (16, 3)  # its own 9.9 ms, capped
    assert cost_cell(cells, 4, 0, at[4][0]) == (4, 0)  # cheaper than any cap: its own
    assert cost_cell(cells, 2, 3, at[2][3]) == (4, 3)  # no cell of its own: 4's caps it
    assert at[13][0] < cells[(16, 0)]  # the fit through 4 and 16 rows, below the cap ...
    assert cost_cell(cells, 13, 0, at[13][0]) == (13, 0)  # ... priced by no median
