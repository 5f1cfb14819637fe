"""`python -m workers.service --model PATH --port 50051` runs a standalone worker."""

from workers.service.cli import worker_main

raise SystemExit(worker_main(prog="python -m workers.service"))
