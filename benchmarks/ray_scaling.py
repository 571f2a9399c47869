"""Ray backend against the local backend, at the same CPU count, on one machine.

A local two-node Ray cluster (``ray.cluster_utils.Cluster``: a head node and one worker node,
one CPU each) runs beside this process for the whole benchmark, so every run sees the same
background. Each workload runs four ways, in alternating order over ``--rounds`` rounds:

* local, 1 worker: ``voxanon anonymise --workers 1`` with one torch/BLAS thread (one CPU);
* local, 2 workers: ``voxanon anonymise --workers 2`` (two spawned processes, one thread each);
* Ray, 1 and 2 workers: ``voxanon anonymise --backend ray --workers N`` (N actors of one CPU each).

Workloads: B2 (McAdams, DSP only) over the whole demo corpus (182 utterances, 462 s), and
``resynth`` (the neural SSL-SAS chain) with random full-size weights (``voxanon models import
ssl-sas --random-init`` into a temporary VOXANON_HOME) over 30 demo utterances. Every run is a
fresh ``voxanon anonymise`` process writing to an empty folder; its time is the runner's own
``wall_seconds`` (run.json): from the first batch submitted to the metadata written, so it
includes the workers' start-up (spawned processes, or actors building the system) but not the
command's imports or joining the cluster.

Printed: throughput (utterances/s and audio s/s), Ray efficiency = Ray throughput / local
throughput at the same worker count (target >= 0.9 for the neural chain), B2's per-utterance
overhead of Ray ((Ray wall - local wall) / utterances), the cluster's start-up time, and whether
every Ray output is byte-identical to the local one. The cluster's workers run at nice 0, as the
local backend's processes do (Ray's default is 15, see the README's "Scaling out").

Measured on the 2-core development machine at a quiet moment (load average about 1, one round):
B2 39.2 / 32.2 utt/s (local / Ray, 1 worker) and 73.6 / 52.5 (2 workers): efficiency 0.82 / 0.71,
Ray overhead +5.5 ms per utterance; resynth 1.79 / 1.75 audio s/s (1 worker) and 3.08 / 2.88
(2 workers): efficiency 0.97 / 0.94; cluster start-up 3.7 s; Ray output byte-identical. Under load
from other users (load average 8-10, best of 2 rounds) resynth gave 0.99 / 0.92 and B2 0.81 / 0.72.

    .venv/bin/python -m benchmarks.ray_scaling [--rounds 2] [--b2-utterances 182] [--resynth-utterances 30]
                                               [--workloads b2,resynth]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

TARGET_NEURAL_EFFICIENCY = 0.9


def demo_subset(count: int, target: Path):
    """``count`` demo utterances taken in turn from each speaker, as a data directory."""
    from voxanon.data_prep.corpus import read_data_dir, write_data_dir
    from voxanon.data_prep.demo_corpus import demo_corpus_dir

    demo = read_data_dir(demo_corpus_dir())
    queues = [sorted(demo.spk2utt[spk]) for spk in sorted(demo.spk2utt)]
    chosen = [queue[i] for i in range(max(map(len, queues))) for queue in queues if i < len(queue)][:count]
    subset = demo.subset(chosen)
    subset = replace(subset, wav=subset.absolute_wav(), trials=[], enrolls=[])
    write_data_dir(subset, target)
    return read_data_dir(target)


def timed_run(system: str, data: Path, out: Path, workers: int, address: str | None) -> float:
    """The runner's wall seconds for one fresh ``voxanon anonymise`` into ``out``/<set>_<system>."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "voxanon.pipeline.cli", "anonymise", "--system", system, "--data", str(data),
               "--out", str(out), "--workers", str(workers), "--quiet"]
    if address is not None:
        command += ["--backend", "ray", "--ray-address", address]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{finished.stderr[-2000:]}")
    return json.loads((out / f"{data.name}_{system}" / "run.json").read_text())["wall_seconds"]


def wav_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*/wav/*.wav"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--b2-utterances", type=int, default=182)
    parser.add_argument("--resynth-utterances", type=int, default=30)
    parser.add_argument("--workloads", default="b2,resynth", help="comma-separated: b2, resynth")
    args = parser.parse_args()
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"

    with tempfile.TemporaryDirectory(prefix="ray-scaling-") as tmp:
        work = Path(tmp)
        os.environ["VOXANON_HOME"] = str(work / "home")
        from voxanon.pipeline.cli import main as voxanon

        if voxanon(["models", "import", "ssl-sas", "--random-init", "--size", "full"]) != 0:
            raise SystemExit("could not write random ssl-sas weights")

        import ray
        from ray.cluster_utils import Cluster


        # Ray runs workers at nice 15 by default: on a shared machine other users' work would starve
        # them, and not the local backend's processes (nice 0). Same priority for both.
        os.environ["RAY_worker_niceness"] = "0"
        started = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        cluster_start = time.perf_counter() - started
        try:
            print(f"cluster start-up (head + one worker node, connected): {cluster_start:.1f} s")
            sizes = {"b2": args.b2_utterances, "resynth": args.resynth_utterances}
            workloads = [(name, demo_subset(sizes[name], work / f"{name}_data")) for name in args.workloads.split(",")]
            for system, data in workloads:
                audio = sum(data.utt2dur.values())
                n = len(data.wav)
                ways = [(f"{kind}-{workers}", kind, workers) for workers in (1, 2) for kind in ("local", "ray")]
                walls: dict[str, list[float]] = {name: [] for name, _, _ in ways}
                identical = True
                for round_index in range(args.rounds):
                    order = ways if round_index % 2 == 0 else ways[::-1]
                    for name, kind, workers in order:
                        address = cluster.address if kind == "ray" else None
                        walls[name].append(timed_run(system, data.path, work / system / name, workers, address))
                    for workers in (1, 2):
                        identical &= (wav_bytes(work / system / f"ray-{workers}")
                                      == wav_bytes(work / system / f"local-{workers}"))
                print(f"\n{system}: {n} utterances, {audio:.0f} s of audio, best of {args.rounds} round(s) "
                      f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
                print(f"{'run':<10} {'wall s':>8} {'utt/s':>8} {'audio s/s':>10}")
                best = {name: min(values) for name, values in walls.items()}
                for name, _, _ in ways:
                    print(f"{name:<10} {best[name]:>8.2f} {n / best[name]:>8.2f} {audio / best[name]:>10.2f}")
                for workers in (1, 2):
                    efficiency = best[f"local-{workers}"] / best[f"ray-{workers}"]
                    overhead_ms = 1000 * (best[f"ray-{workers}"] - best[f"local-{workers}"]) / n
                    line = f"Ray efficiency, {workers} worker(s): {efficiency:.2f}"
                    if system == "b2":
                        line += f"; Ray overhead {overhead_ms:+.1f} ms per utterance"
                    elif efficiency < TARGET_NEURAL_EFFICIENCY:
                        line += f" (below the {TARGET_NEURAL_EFFICIENCY} target)"
                    print(line)
                print(f"Ray output byte-identical to local: {'yes' if identical else 'NO'}")
        finally:
            ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    main()
