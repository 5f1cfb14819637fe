"""Stop 50: the C head step up to 16 rows (host_head.NATIVE_MAX_ROWS = 16, stop 48) against
up to 4 (before it), adaptive MTP engines in turns with plain, in one process: the check of
stop 49's flag (B = 8 adaptive MTP ÷ BatchGenerator read 1.09 / 0.99 after against 1.50 / 1.36
before, single passes of bench/engine.py).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s50/native_rows_ab_cpu.py 3 32 3 1 8
"""

import contextlib

from bench.turns import ab_main, patched
from workers.mtp import host_head

ab_main(
    {
        "native16": contextlib.nullcontext,
        "native4": lambda: patched(host_head, "NATIVE_MAX_ROWS", 4),
    }
)
