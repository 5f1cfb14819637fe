"""Stop 46, CPU: does mx.async_eval return before the graph is computed, and does it release the
GIL while it waits?

    PYTHONPATH=. python bench/results/s46/gil_async_eval_cpu.py

A 3,000-op graph evaluated with async_eval and with eval while a Python thread counts: the call's
time, the thread's count during it, and its count alone for 100 ms.
"""

import threading
import time

import mlx.core as mx


def build():
    x = mx.ones((64, 256))
    w = mx.ones((256, 256)) * 0.001
    for _ in range(3000):
        x = mx.tanh(x @ w)
    return x


for fn in ("async_eval", "eval"):
    x = build()
    counter = [0]
    stop = [False]

    def spin(stop=stop, counter=counter):
        while not stop[0]:
            counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    c0 = counter[0]
    t0 = time.perf_counter()
    getattr(mx, fn)(x)
    t1 = time.perf_counter()
    c1 = counter[0]
    mx.eval(x)
    t2 = time.perf_counter()
    c2 = counter[0]
    stop[0] = True
    t.join()
    print(
        fn,
        f"call {1e3 * (t1 - t0):.1f} ms, spins during call {c1 - c0}, after-wait {1e3 * (t2 - t1):.1f} ms spins {c2 - c1}",
    )
# baseline spin rate
counter = [0]
stop = [False]
t = threading.Thread(target=spin, args=(stop, counter))
t.start()
time.sleep(0.1)
stop[0] = True
t.join()
print("spins per 100ms alone", counter[0])
