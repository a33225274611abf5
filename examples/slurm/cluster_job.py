"""examples/slurm/cluster_job.py - what examples/slurm/troupe.sbatch runs on the job's
troupe cluster: an actor on every node, a gloo group across them (an allreduce of 4 MiB),
and an object put here and summed by the actor on the last node (pulled across). Prints a
line per check; exits non-zero if one fails. With a second argument SECONDS it then
sleeps that long (a job to cancel)."""
import socket
import sys
import time

import numpy as np

import troupe
import troupe.util.collective as col


@troupe.remote
class Member:
    def host(self):
        return socket.gethostname()

    def allreduce(self, n, value):
        x = np.full(n, float(value), dtype=np.float32)
        col.allreduce(x, group_name="job")
        return float(x[0]), float(x[-1])

    def total(self, values):
        return float(np.asarray(values).sum())


def main():
    troupe.init()  # (TROUPE_ADDRESS: the job's head)
    ips = sorted({n["NodeManagerAddress"] for n in troupe.nodes() if n["Alive"]})
    print(f"nodes: {len(ips)}", flush=True)
    members = [Member.options(resources={f"node:{ip}": 0.01}).remote() for ip in ips]
    hosts = troupe.get([m.host.remote() for m in members])
    print("actors on:", " ".join(sorted(hosts)), flush=True)
    col.create_collective_group(members, len(members), list(range(len(members))),
                                backend="gloo", group_name="job")
    want = float(sum(range(1, len(members) + 1)))
    sums = troupe.get([m.allreduce.remote(1 << 20, r + 1) for r, m in enumerate(members)])
    ok_sum = all(s == (want, want) for s in sums)
    print(f"gloo allreduce across {len(members)} nodes: {'ok' if ok_sum else sums}",
          flush=True)
    values = np.arange(4 << 20, dtype=np.float64)  # 32 MiB, in this node's store
    ref = troupe.put(values)
    got = troupe.get(members[-1].total.remote(ref))
    ok_pull = got == float(values.sum())
    print(f"object pulled across by {hosts[-1]}: {'ok' if ok_pull else got}", flush=True)
    if len(sys.argv) > 1:
        print("sleeping", flush=True)
        time.sleep(float(sys.argv[1]))
    troupe.shutdown()
    return 0 if ok_sum and ok_pull and len(set(hosts)) == len(ips) else 1


if __name__ == "__main__":
    sys.exit(main())
