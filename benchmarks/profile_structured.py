"""Profile the StructuredWriter workload's timed loop only with ``perf``.

perf attaches after the setup (imports, data, the 2,000-step warm-up) and
stops when the loop ends, so the profile holds ``run(steps)`` alone:

    PYTHONPATH=. python benchmarks/profile_structured.py small structured 200000 \
        /tmp/sw.data
    perf report -i /tmp/sw.data --no-children --sort dso,sym --stdio -g none
    perf report -i /tmp/sw.data --children --sort sym --stdio -g none

kind: small | atari; via: structured | trajectory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from fastreplay.bench import workloads


def main(kind: str, via: str, steps: int, out: str) -> None:
    obs = workloads.ATARI_OBS if kind == "atari" else workloads.SMALL_OBS
    work = workloads.StructuredWorkload(obs, via)
    work.run(2000)
    perf = subprocess.Popen(
        ["perf", "record", "-F", "1999", "--call-graph", "dwarf,16384", "-o", out,
         "-p", str(os.getpid())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # perf is attached (idle time gives no samples)
    t0 = time.perf_counter()
    work.run(steps)
    seconds = time.perf_counter() - t0
    perf.send_signal(signal.SIGINT)
    perf.wait()
    work.close()
    print(f"{kind} {via}: {steps / seconds:,.0f} steps/s "
          f"({seconds / steps * 1e6:.2f} us/step); profile in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
