#!/usr/bin/env python3
"""Benchmarks of the executors against the engines' own tools, in one run.

    scripts/bench.py                 # full sizes, writes BENCHMARKS.md
    scripts/bench.py --quick --out /tmp/bench.md   # tiny sizes (CI)

Every row times the executor and its baseline on the same engine in the
same run and reports medians of several repetitions and their ratio. The
Kubernetes rows run on the project's test cluster (tests/kube-testcluster),
whose pods are containers of the same engine. Needs the engine and image
that scripts/prepare-engine.sh provides, and release builds (built here).

The link rows (`--only link_per_step link_checkout`) put a knotless-link
(tests/link) in front of the engine's socket and of each test cluster's
API server: a 50 ms round trip for the per-step rows, 100 Mbit/s each way
with a 20 ms round trip for the checkout rows; the engines' CLIs go
through the same link in the same run.
"""

import argparse
import http.client
import json
import os
import platform
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("KNOTLESS_TEST_IMAGE", "knotless-busybox:local")
KEEPALIVE = ["sh", "-c", "while :; do sleep 3600; done"]
# Issue 33's most for a step on loopback, on Docker and the test cluster:
# an absolute figure, as the issue states it, beside the ratios.
STEP_MOST = 0.005


def per(ours, base):
    """ours / base, or infinity when a quick run timed the base at zero
    (a ratio is only judged on a full run)."""
    return ours / base if base > 0 else float("inf")


YES = "yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"


def without_usage(scripts_rs):
    """Takes what measures a step's usage out of the step's start in a copy
    of the tree (usage_cost's baseline), the shell's and the agent's: the
    sampler of its processes' peaks and the cgroup reads. The CPU time is two builtins' reads and
    stays, as the start needs its line. Fails naming what it could not find."""
    text = scripts_rs.read_text()
    lines, out, skipping, found = text.split("\n"), [], False, set()
    for line in lines:
        if line.startswith('    ( unset IFS; t=" $c "'):
            skipping, found = True, found | {"sampler"}
            continue
        if skipping:
            if line == "      done ) &":
                skipping = False
            continue
        if line in ("    m=$!", '    kill -9 "$m" 2>/dev/null', '    wait "$m"'):
            line, found = "    :", found | {line.split()[0]}
        elif line.startswith("  _kp0=; {"):
            line, found = "  _kp0=", found | {"p0"}
        elif line.startswith("    lim=; {"):
            line, found = "    lim=", found | {"lim"}
        elif line.startswith("    p1=; {"):
            line, found = "    p1=", found | {"p1"}
        out.append(line)
    missing = {"sampler", "m=$!", "kill", "wait", "p0", "lim", "p1"} - found
    if missing or skipping:
        sys.exit(f"usage_cost: {scripts_rs} no longer has the usage parts it takes out ({', '.join(sorted(missing)) or 'the sampler end'}): mend without_usage in scripts/bench.py")
    scripts_rs.write_text("\n".join(out))
    # The channel's agent measures the same in its supervisor.
    step_rs = scripts_rs.parents[2] / "helper" / "agent" / "step.rs"
    text = step_rs.read_text()
    for line, instead in [
        ('    let peak_before = cgroup_number(b"memory.peak", b"memory/memory.max_usage_in_bytes");', "    let peak_before: Option<u64> = None;"),
        ("            sampler.sample(pipes);", "            let _ = &mut sampler;"),
        ('    let limit = cgroup_number(b"memory.max", b"memory/memory.limit_in_bytes").unwrap_or(0);', "    let limit = 0;"),
        ('    let peak = cgroup_number(b"memory.peak", b"memory/memory.max_usage_in_bytes").unwrap_or(0);', "    let peak = 0;"),
    ]:
        if text.count(line) != 1:
            sys.exit(f"usage_cost: {step_rs} no longer has {line.strip()!r} once: mend without_usage in scripts/bench.py")
        text = text.replace(line, instead)
    step_rs.write_text(text)


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.reps = 1 if args.quick else args.reps
        self.tmp = Path(tempfile.mkdtemp(prefix="knotless-bench-"))
        profile = "debug" if args.quick else "release"
        self.bin_dir = ROOT / "target" / profile
        self.rows = []
        self.notes = []
        self.clusters = []
        self.env_v4 = None
        self.env = dict(os.environ)
        self.can_drop_caches = os.access("/proc/sys/vm/drop_caches", os.W_OK)
        self.gnu_time = next((t for t in ["/usr/bin/time"] if os.access(t, os.X_OK)), None)
        self.links = []
        self.noted_busy = False

    # -- helpers ---------------------------------------------------------
    def sh(self, cmd, shell=None):
        shell = isinstance(cmd, str) if shell is None else shell
        return subprocess.run(cmd, shell=shell, check=True, capture_output=True, text=True, env=self.env).stdout

    def timed(self, cmd, shell=False, env=None):
        """Seconds of one command."""
        start = time.perf_counter()
        p = subprocess.run(cmd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or self.env)
        secs = time.perf_counter() - start
        if p.returncode != 0:
            raise RuntimeError(f"{cmd!r} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
        return secs

    def median(self, fn):
        values = [fn() for _ in range(self.reps)]

        def med(xs):
            xs = [x for x in xs if x is not None]
            return statistics.median(xs) if xs else None
        if isinstance(values[0], tuple):
            return tuple(med(v[i] for v in values) for i in range(len(values[0])))
        return med(values)

    def steps(self, name, lines):
        path = self.tmp / f"{name}.tsv"
        path.write_text("".join(f"{n}\t{s}\n" for n, s in lines))
        return path

    def checkout(self, name, big_bytes=0, small_files=0):
        d = self.tmp / f"checkout-{name}"
        if d.exists():
            return d
        d.mkdir()
        if big_bytes:
            with open(d / "big.bin", "wb") as f:
                chunk = os.urandom(1 << 20)
                for _ in range(big_bytes >> 20):
                    f.write(chunk)
                f.write(os.urandom(big_bytes & ((1 << 20) - 1)))
        for i in range(small_files):
            sub = d / f"d{i // 500}"
            sub.mkdir(exist_ok=True)
            (sub / f"f{i}.txt").write_bytes(os.urandom(1024))
        return d

    def runner(self, executor, steps, workdir, extra=(), first_step=False, ok_codes=(0,), env=None, binary=None, tag="", image=None):
        """One runner-cli run: seconds, peak RSS, seconds to the first step's start.
        `env` replaces the engine's environment (a link's, from `through`);
        `binary` is another runner-cli (an earlier commit's); `tag` names a
        run of its own (its name, outputs, result and log), for runs at once:
        one run name is one run, which a second runner may not take over."""
        suffix = f"-{tag}" if tag else ""
        out = self.tmp / f"out{suffix}"
        shutil.rmtree(out, ignore_errors=True)
        env = env or (self.env_v4 if executor == "k8s-v4" else self.env)
        executor = "k8s" if executor == "k8s-v4" else executor
        cmd = [str(binary or self.bin_dir / "runner-cli"), "run", "--executor", executor, "--name", f"bench{suffix}", "--runner", "did:plc:bench",
               "--workdir", str(workdir), "--steps-file", str(steps), "--outputs", str(out),
               "--result", str(self.tmp / f"result{suffix}.json"), "--log", "-" if first_step else str(self.tmp / f"run{suffix}.log"), "--no-cleanup",
               # The log rows measure every byte written, past the default limit.
               "--log-limit", "none", *extra]
        if executor != "shell":
            cmd += ["--image", image or IMAGE]
        if executor == "docker":
            cmd += ["--pull", "never", "--network", "none"]
        # The runner's peak RSS comes from GNU time, which forks it from its
        # own small process: a child's ru_maxrss as this script would see it
        # starts at this script's peak, since the kernel counts the memory
        # it was spawned from.
        peak = self.tmp / f"peak-rss-{threading.get_ident()}"
        if self.gnu_time:
            cmd = [self.gnu_time, "-f", "%M", "-o", str(peak), *cmd]
        start = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE if first_step else subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        first = None
        if first_step:
            for line in p.stdout:
                if first is None and b": started" in line and line.startswith(b"==> step "):
                    first = time.perf_counter() - start
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        secs = time.perf_counter() - start
        self.last_cpu = usage.ru_utime + usage.ru_stime
        if p.returncode not in ok_codes:
            raise RuntimeError(f"runner-cli {executor} exited {p.returncode}: {p.stderr.read().decode(errors='replace')[-2000:]}")
        rss = int(peak.read_text().split()[-1]) if self.gnu_time else usage.ru_maxrss
        return secs, rss * 1024, first

    def settle(self, *warm):
        """Writes back and drops the kernel's clean caches, then reads `warm`
        (folders, or commands whose output is discarded) and the tools
        back in, so a timed transfer starts from the same state whatever
        the one before it deleted.

        Why: on ext4 without a journal (this machine's root filesystem),
        creating a file skips every inode freed in the last 60 s (360 s
        while its inode-table block is dirty) and reads that block for
        each one it skips; after a repetition deletes 20,000 files, every
        create of the next pays for all 20,000 (`perf`: 72% of the
        runner's time in `recently_deleted`). An inode whose table block is
        no longer cached counts as written out and is reused at once.
        Needs root; without it nothing is dropped and the notes say so."""
        if self.can_drop_caches:
            subprocess.run(["sync"], check=True)
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
        # Read by `cat`, not into this script: its own memory stays small.
        tools = [str(self.bin_dir / "runner-cli"), shutil.which("docker"), shutil.which("kubectl"), shutil.which("tar")]
        subprocess.run(["cat", *filter(None, tools)], check=True, stdout=subprocess.DEVNULL)
        for w in warm:
            cmd = f"tar c -C {w} ." if isinstance(w, Path) else w
            subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, env=self.env)
        if not self.quick:
            self.quiet()

    def quiet(self, most=0.1, window=0.3, deadline=60.0):
        """Waits until the machine's CPUs have been idle for a `window`
        (at most `most` of a core busy), for up to `deadline` seconds.

        Why: deleting a file is not done when `unlink` returns. On this
        machine's root filesystem (ext4 mounted with `discard`, on a
        virtual disk) the kernel discards the freed blocks afterwards in
        a worker thread: a deleted 1 GiB file cost 4 to 7 s of a core's
        system time in `kworker` after `unlink` and `sync` had returned
        (`/proc/PID/stat` before and after). Every 1 GiB row deletes the
        repetition before's copy first, so without this wait a timed copy
        on two cores shared one of them with the discards of whatever
        came just before it, the runner's and the baseline's alike: the
        same 1 GiB copy took 3.8 s or 7.2 s. A wait that runs out is
        said once in the notes. Quick runs (CI's) are not judged and do not
        wait: a machine that is never idle would hold them for minutes."""
        def busy():
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
            return sum(ticks) - ticks[3] - ticks[4], sum(ticks)
        cpus = os.cpu_count() or 1
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            b0, t0 = busy()
            # A sampling window, not a wait for something: busy time is
            # only known over an interval.
            time.sleep(window)
            b1, t1 = busy()
            if (b1 - b0) / max(t1 - t0, 1) * cpus <= most:
                return
        if not self.noted_busy:
            self.noted_busy = True
            self.notes.append(f"A timed copy started on a machine still busy after {deadline:.0f} s of waiting for it to settle (see `quiet` in the script); such rows are noisier.")

    def phases(self):
        """The last run's own timings (result JSON `phases`), in seconds."""
        p = json.loads((self.tmp / "result.json").read_text())["phases"]
        return p["startMs"] / 1000, p["outputsMs"] / 1000

    def row(self, measurement, where, ours, baseline, ratio, target, met, note=""):
        self.rows.append((measurement, where, ours, baseline, ratio, target, "yes" if met else "**no**", note))
        # Written after every row, so a long run that is stopped keeps what it measured.
        self.report(self.args.out, partial=True)
        print(f"  {measurement} [{where}]: {ours} vs {baseline} -> {ratio} (target {target}) {'ok' if met else 'MISSED'}", flush=True)

    # -- engines ---------------------------------------------------------
    def container(self):
        """A baseline container that only waits. Its data goes to the volume
        at /vol, as the executor's does (its run folders are volumes), so
        both write to the same kind of filesystem."""
        return self.sh(["docker", "run", "-d", "--network", "none", "-v", "/vol", IMAGE, *KEEPALIVE]).strip()

    def remove(self, cid):
        self.sh(["docker", "rm", "-f", "-v", cid])

    def start_cluster(self):
        """Two test clusters: one that speaks v5 (kubectl's baselines run
        there), and a v4-only one, as API servers before 1.30 are, for the
        executor's v4 rows (kubectl cannot exec there: it speaks v5 or
        SPDY, never v4, so its v5 figure is the baseline of both rows)."""
        self.clusters = []
        self.env["HOME"] = str(self.tmp)
        self.env_v4 = dict(self.env)
        for env, flags in [(self.env, []), (self.env_v4, ["--v4-only"])]:
            p = subprocess.Popen([str(self.bin_dir / "kube-testcluster"), *flags], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env)
            kubeconfig = p.stdout.readline().strip()
            if not kubeconfig:
                raise RuntimeError("kube-testcluster did not start")
            self.clusters.append(p)
            env["KUBECONFIG"] = kubeconfig

    def stop_cluster(self):
        for cluster in getattr(self, "clusters", []):
            cluster.send_signal(2)
            cluster.wait(timeout=60)

    def job_manifest(self, name):
        """A file holding the baseline's Job: one pod that only waits, with
        an emptyDir at /vol as the executor's run folders are."""
        manifest = self.tmp / f"{name}.yaml"
        manifest.write_text(f"""apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: {IMAGE}
        command: {json.dumps(KEEPALIVE)}
        volumeMounts: [{{name: vol, mountPath: /vol}}]
      volumes: [{{name: vol, emptyDir: {{}}}}]
""")
        return manifest

    def baseline_exec(self, executor):
        """Where a baseline runs for `executor`: a fresh container (docker;
        the caller removes it) or the kubectl baseline pod (k8s, both
        modes). Returns the container id or None, the tool's name, its
        exec with and without stdin, and the note a v4 row's baseline gets."""
        cid = self.container() if executor == "docker" else None
        tool = "docker" if cid else "kubectl"
        exec_in = f"docker exec -i {cid}" if cid else f"kubectl exec -i {self.baseline_pod()} --"
        exec_out = f"docker exec {cid}" if cid else f"kubectl exec {self.baseline_pod()} --"
        return cid, tool, exec_in, exec_out, V5_BASE if executor == "k8s-v4" else ""

    def baseline_pod(self):
        """The name of the pod the kubectl baselines exec in, made on first use."""
        if getattr(self, "k8s_pod", None) is None:
            self.k8s_pod = self.pod()
        return self.k8s_pod

    def pod(self):
        self.sh(["kubectl", "create", "-f", str(self.job_manifest("bench-baseline"))])
        self.sh(["kubectl", "wait", "--for=condition=Ready", "pod", "-l", "job-name=bench-baseline", "--timeout=120s"])
        return self.sh(["kubectl", "get", "pods", "-l", "job-name=bench-baseline", "-o", "jsonpath={.items[0].metadata.name}"]).strip()

    # -- links -----------------------------------------------------------
    def linked(self, upstream, delay_ms, rate_mbit=None):
        """Starts a knotless-link in front of `upstream` (unix:PATH or
        tcp:HOST:PORT); returns the address it listens on."""
        cmd = [str(self.bin_dir / "knotless-link"), "--to", upstream, "--delay-ms", str(delay_ms)]
        if rate_mbit:
            cmd += ["--rate-mbit", str(rate_mbit)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        addr = p.stdout.readline().strip()
        if not addr:
            raise RuntimeError(f"knotless-link did not start: {cmd}")
        self.links.append(p)
        return addr

    def stop_links(self):
        for p in getattr(self, "links", []):
            p.terminate()
            p.wait(timeout=30)
        self.links = []

    def through(self, delay_ms, rate_mbit=None):
        """Environments whose engine (DOCKER_HOST) and API servers
        (KUBECONFIG) are reached through a link each, `delay_ms` each way
        and `rate_mbit` each way if given: {"docker": env, "k8s": env, "k8s-v4": env}."""
        host = self.env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if not host.startswith("unix://"):
            raise RuntimeError(f"the link rows need the engine on a Unix socket, not {host}")
        docker = dict(self.env)
        docker["DOCKER_HOST"] = "tcp://" + self.linked("unix:" + host[len("unix://"):], delay_ms, rate_mbit)
        envs = {"docker": docker}
        for key, base in [("k8s", self.env), ("k8s-v4", self.env_v4)]:
            text = Path(base["KUBECONFIG"]).read_text()
            server = next(l.split("server:", 1)[1].strip() for l in text.splitlines() if l.strip().startswith("server:"))
            hostport = server.split("://", 1)[1].rstrip("/")
            addr = self.linked("tcp:" + hostport, delay_ms, rate_mbit)
            kubeconfig = self.tmp / f"kubeconfig-{key}-{delay_ms}-{rate_mbit}"
            kubeconfig.write_text(text.replace(server, "https://" + addr))
            env = dict(base)
            env["KUBECONFIG"] = str(kubeconfig)
            envs[key] = env
        return envs

    def source_tree(self):
        """A real source tree to check out: Rust crates' sources from
        cargo's registry (text, as a repository's is), 100 MiB or more
        (2 MiB with --quick)."""
        d = self.tmp / "checkout-source"
        if d.exists():
            return d
        want = (2 << 20) if self.quick else (100 << 20)
        registry = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "registry" / "src"
        got = 0
        for crate in sorted(registry.glob("*/*")):
            if got >= want:
                break
            shutil.copytree(crate, d / crate.name, symlinks=True, ignore_dangling_symlinks=True)
            got += sum(f.stat().st_size for f in (d / crate.name).rglob("*") if f.is_file() and not f.is_symlink())
        if got < want:
            raise RuntimeError(f"cargo's registry holds {got >> 20} MiB of sources, fewer than the {want >> 20} MiB the row needs")
        self.source_bytes = got
        return d

    def link_per_step(self):
        """Per-step overhead over a 50 ms round trip, against each engine's CLI over the same link."""
        delay = 25
        rtt = 2 * delay / 1000
        n = 3 if self.quick else 20
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        many = self.steps(f"many-{n}", [("s0", "true")] + [(f"s{i + 1}", "true") for i in range(n)])
        envs = self.through(delay)
        try:
            cid = self.container()
            pod = self.baseline_pod()
            try:
                for executor, where in [("docker", "docker"), *K8S_MODES]:
                    env = envs[executor]
                    if executor == "docker":
                        cli = f"for i in $(seq {n}); do docker exec {cid} true; done"
                    else:
                        cli = f"for i in $(seq {n}); do kubectl exec {pod} -- true; done"
                    cli_env = envs["k8s"] if executor == "k8s-v4" else env
                    m = self.interleaved(
                        cli=lambda: self.timed(cli, shell=True, env=cli_env),
                        one=lambda: self.runner(executor, one, empty, env=env)[0],
                        many=lambda: self.runner(executor, many, empty, env=env)[0])
                    mine, base = (m["many"] - m["one"]) / n, m["cli"] / n
                    target = 1.2 * rtt + 0.005
                    tool = "docker exec" if executor == "docker" else "kubectl exec"
                    self.row(f"per-step overhead over a {rtt * 1000:.0f} ms round trip, {n} × `true`", where, f"{mine * 1000:.0f} ms ({mine / rtt:.2f} round trips)",
                             f"{tool} {base * 1000:.0f} ms ({base / rtt:.2f} round trips){V5_BASE if executor == 'k8s-v4' else ''}", f"{per(mine, base):.2f}× CLI",
                             f"≤ 1.2 round trips + 5 ms ({target * 1000:.0f} ms)", mine <= target)
            finally:
                self.remove(cid)
        finally:
            self.stop_links()

    def link_start(self):
        """Start to first step over a 50 ms round trip, against the engine's
        CLI starting the same environment over the same link plus two
        round trips (the checkout's upload and the first step's start)."""
        delay = 25
        rtt = 2 * delay / 1000
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        reps = 1 if self.quick else max(self.reps, 5)
        envs = self.through(delay)
        try:
            def container_start():
                t = time.perf_counter()
                cid = subprocess.run(["docker", "run", "-d", "--network", "none", IMAGE, *KEEPALIVE], check=True,
                                     capture_output=True, text=True, env=envs["docker"]).stdout.strip()
                dt = time.perf_counter() - t
                self.remove(cid)
                return dt

            def pod_start(env):
                name = f"bench-start-{time.monotonic_ns()}"
                manifest = self.job_manifest(name)
                t = time.perf_counter()
                subprocess.run(["kubectl", "create", "-f", str(manifest)], check=True, capture_output=True, env=env)
                subprocess.run(["kubectl", "wait", "--for=condition=Ready", "pod", "-l", f"job-name={name}", "--timeout=120s"],
                               check=True, capture_output=True, env=env)
                dt = time.perf_counter() - t
                self.sh(["kubectl", "delete", "job", name, "--cascade=foreground"])
                return dt
            for executor, where in [("docker", "docker"), *K8S_MODES]:
                env = envs[executor]
                if executor == "docker":
                    base_fn, tool = container_start, "`docker run -d`"
                else:
                    cli_env = envs["k8s"] if executor == "k8s-v4" else env
                    base_fn, tool = (lambda e=cli_env: pod_start(e)), "`kubectl create` + `kubectl wait` Ready"
                m = self.interleaved(reps, base=base_fn, first=lambda: self.runner(executor, one, empty, first_step=True, env=env)[2])
                base, first = m["base"], m["first"]
                target = base + 2 * rtt
                self.row(f"start to first step over a {rtt * 1000:.0f} ms round trip", where, f"{first * 1000:.0f} ms ({first / rtt:.1f} round trips)",
                         f"{base * 1000:.0f} ms ({tool} over the same link){V5_BASE if executor == 'k8s-v4' else ''}",
                         f"{(first - base) / rtt:+.1f} round trips", f"≤ the CLI + 2 round trips ({target * 1000:.0f} ms)", first <= target)
        finally:
            self.stop_links()

    def link_checkout(self):
        """A checkout over 100 Mbit/s with a 20 ms round trip: a source tree
        against `tar c | CLI exec -i … tar x` over the same link, and
        random bytes (nothing to gain) against the runner's own
        uncompressed copy."""
        delay, rate = 10, 100
        src, empty = self.source_tree(), self.checkout("empty")
        rnd_bytes = (1 << 20) if self.quick else (64 << 20)
        rnd = self.checkout("random", big_bytes=rnd_bytes)
        one = self.steps("one", [("s0", "true")])
        envs = self.through(delay, rate)
        size = getattr(self, "source_bytes", 0)
        never = ["--compression", "never"]
        try:
            for executor, where in [("docker", "docker"), *K8S_MODES]:
                env = envs[executor]
                cid, tool, exec_in, exec_out, v5_base = self.baseline_exec(executor)
                base_env = envs["k8s"] if executor == "k8s-v4" else env
                try:
                    def base_in():
                        self.sh(f"{exec_out} sh -c 'rm -rf /vol/in && mkdir /vol/in'")
                        self.settle(src)
                        return self.timed(f"tar c -C {src} . | {exec_in} tar x -C /vol/in", shell=True, env=base_env)

                    def start_with(checkout, extra=()):
                        self.settle(checkout)
                        self.runner(executor, one, checkout, extra, env=env)
                        return self.phases()[0]
                    m = self.interleaved(base=base_in, empty=lambda: start_with(empty), full=lambda: start_with(src),
                                         plain_empty=lambda: start_with(empty, never), plain=lambda: start_with(src, never))
                    ours = max(m["full"] - m["empty"], 0.0)
                    plain = max(m["plain"] - m["plain_empty"], 0.0)
                    self.row(f"checkout in over 100 Mbit/s, 20 ms round trip: {size >> 20} MiB source tree", where, f"{ours:.2f} s",
                             f"{m['base']:.2f} s (`tar c | {tool} exec -i … tar x` over the same link){v5_base}", f"{per(ours, m['base']):.2f}×", "≤ 0.25×", ours <= m["base"] * 0.25,
                             f"uncompressed (`--compression never`) {plain:.2f} s")
                    m = self.interleaved(empty=lambda: start_with(empty), full=lambda: start_with(rnd),
                                         plain_empty=lambda: start_with(empty, never), plain=lambda: start_with(rnd, never))
                    ours = max(m["full"] - m["empty"], 0.0)
                    plain = max(m["plain"] - m["plain_empty"], 0.0)
                    self.row(f"checkout in over 100 Mbit/s, 20 ms round trip: {rnd_bytes >> 20} MiB of random bytes", where, f"{ours:.2f} s",
                             f"{plain:.2f} s (the runner with `--compression never`)", f"{per(ours, plain):.2f}×", "≤ 1.05×", ours <= plain * 1.05)

                    # Outputs back over the same link: a step copies the
                    # source tree from the steps folder into OUTPUTS_DIR,
                    # and the runner's outputs phase is the time; the
                    # baseline copies the same tree out of its container.
                    gen_out = self.steps("gen-out-tree", [("gen", 'cp -R /steps/. "$OUTPUTS_DIR"/')])
                    self.sh(f"{exec_out} sh -c 'rm -rf /vol/o && mkdir -p /vol/o'")
                    self.sh(f"tar c -C {src} . | {exec_in} tar x -C /vol/o")
                    dest = self.tmp / "base-out"

                    def outputs_phase(extra=()):
                        shutil.rmtree(self.tmp / "out", ignore_errors=True)
                        self.settle(src)
                        self.runner(executor, gen_out, empty, ["--steps-dir", str(src), *extra], env=env)
                        return self.phases()[1]

                    def base_out():
                        shutil.rmtree(dest, ignore_errors=True)
                        dest.mkdir()
                        return self.timed(f"{exec_out} tar c -C /vol/o . | tar x -C {dest}", shell=True, env=base_env)
                    m = self.interleaved(base=base_out, ours=outputs_phase, plain=lambda: outputs_phase(never))
                    self.row(f"outputs back over 100 Mbit/s, 20 ms round trip: {size >> 20} MiB source tree", where, f"{m['ours']:.2f} s",
                             f"{m['base']:.2f} s (`{tool} exec … tar c | tar x` over the same link){v5_base}", f"{per(m['ours'], m['base']):.2f}×", "≤ 0.25×", m["ours"] <= m["base"] * 0.25,
                             f"uncompressed (`--compression never`) {m['plain']:.2f} s")
                finally:
                    if cid:
                        self.remove(cid)
        finally:
            self.stop_links()

    # -- rows ------------------------------------------------------------
    def interleaved(self, reps=None, **fns):
        """Medians of each measurement, taken in turn within every repetition
        (`reps`, default --reps), so drift in the machine's speed falls on
        all of them alike."""
        values = {name: [] for name in fns}
        for _ in range(reps or self.reps):
            for name, fn in fns.items():
                values[name].append(fn())
        return {name: statistics.median(v) for name, v in values.items()}

    def per_step(self):
        n = 10 if self.quick else 100
        self.cpu_per_step = {}
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        many = self.steps("many", [("s0", "true")] + [(f"s{i + 1}", "true") for i in range(n)])
        cpu = {}

        def runner(executor, steps, key):
            secs = self.runner(executor, steps, empty)[0]
            cpu.setdefault(key, []).append(self.last_cpu)
            return secs

        def ours(m, executor):
            # The runner's own CPU time per step: what it spends, as opposed to waits on the engine.
            self.cpu_per_step[executor] = (statistics.median(cpu[f"{executor}-many"]) - statistics.median(cpu[f"{executor}-one"])) / n
            return (m["many"] - m["one"]) / n

        m = self.interleaved(
            base=lambda: self.timed(f"for i in $(seq {n}); do sh -ec true; done", shell=True),
            one=lambda: runner("shell", one, "shell-one"),
            many=lambda: runner("shell", many, "shell-many"))
        base, mine = m["base"] / n, ours(m, "shell")
        self.row(f"per-step overhead, {n} × `true`", "shell", f"{mine * 1000:.2f} ms", f"{base * 1000:.2f} ms (`sh -ec true`)", f"{per(mine, base):.2f}×", "≤ 1.5×", per(mine, base) <= 1.5)

        cid = self.container()
        try:
            def bare():
                p = subprocess.run([str(self.bin_dir / "examples" / "bare_docker_exec"), cid, str(n)], check=True, capture_output=True, text=True, env=self.env)
                self.floor_phases = p.stderr.strip()
                return float(p.stdout)
            m = self.interleaved(
                cli=lambda: self.timed(f"for i in $(seq {n}); do docker exec {cid} true; done", shell=True),
                floor=bare,
                one=lambda: runner("docker", one, "docker-one"),
                many=lambda: runner("docker", many, "docker-many"))
        finally:
            self.remove(cid)
        cli, floor, mine = m["cli"] / n, m["floor"] / n, ours(m, "docker")
        self.notes.append(f"runner-cli's own CPU time per step (user + system, from the kernel's accounting): docker {self.cpu_per_step['docker'] * 1000:.2f} ms of {mine * 1000:.1f} ms; the rest is waiting on the engine.")
        self.notes.append(f"Docker per-step floor, where a bare exec's time goes ({n} execs of `true`, the last repetition): {self.floor_phases}.")
        self.row(f"per-step overhead, {n} × `true`", "docker", f"{mine * 1000:.1f} ms", f"CLI {cli * 1000:.1f} ms; floor {floor * 1000:.1f} ms", f"{per(mine, cli):.2f}× CLI, {per(mine, floor):.2f}× floor", f"≤ 0.5× CLI, ≤ 1.2× floor, ≤ {STEP_MOST * 1000:.0f} ms", per(mine, cli) <= 0.5 and per(mine, floor) <= 1.2 and mine <= STEP_MOST)

        pod = self.baseline_pod()
        for executor, where in K8S_MODES:
            m = self.interleaved(
                cli=lambda: self.timed(f"for i in $(seq {n}); do kubectl exec {pod} -- true; done", shell=True),
                floor=lambda: float(self.sh([str(self.bin_dir / "examples" / "bare_kube_exec"), pod, str(n)])),
                one=lambda: runner(executor, one, f"{executor}-one"),
                many=lambda: runner(executor, many, f"{executor}-many"))
            cli, floor, mine = m["cli"] / n, m["floor"] / n, ours(m, executor)
            self.notes.append(f"runner-cli's own CPU time per step on the test cluster ({where}): {self.cpu_per_step[executor] * 1000:.2f} ms of {mine * 1000:.1f} ms.")
            self.row(f"per-step overhead, {n} × `true`", where, f"{mine * 1000:.1f} ms", f"kubectl {cli * 1000:.1f} ms; floor {floor * 1000:.1f} ms{V5_BASE if executor == 'k8s-v4' else ''}", f"{per(mine, cli):.2f}× kubectl, {per(mine, floor):.2f}× floor", f"≤ 0.5× kubectl, ≤ 1.2× floor, ≤ {STEP_MOST * 1000:.0f} ms", per(mine, cli) <= 0.5 and per(mine, floor) <= 1.2 and mine <= STEP_MOST)

    def usage_cost(self):
        """What measuring each step's usage costs a step: the per-step
        overhead of this runner against the same tree built without it
        (`without_usage`: no sampler, no cgroup reads), in the same run."""
        if self.quick:
            # A second runner's build is no smoke test.
            print("  (usage_cost needs a full run: skipped with --quick)", flush=True)
            return
        tree = self.tmp / "usage-baseline"
        self.sh(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(tree), "HEAD"])
        try:
            # The working tree as it is, committed or not.
            diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--binary", "HEAD"], check=True, capture_output=True).stdout
            if diff:
                subprocess.run(["git", "-C", str(tree), "apply", "--binary", "-"], input=diff, check=True)
            without_usage(tree / "executor-container" / "src" / "detached" / "scripts.rs")
            target = ROOT / "target" / "usage-baseline"
            subprocess.run(["cargo", "build", "--release", "-p", "runner-cli", "--bin", "runner-cli"], cwd=tree, check=True,
                           env={**os.environ, "CARGO_TARGET_DIR": str(target)})
            before = target / "release" / "runner-cli"
        finally:
            self.sh(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
        n = 100
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        many = self.steps("many", [("s0", "true")] + [(f"s{i + 1}", "true") for i in range(n)])
        for executor, where in [("shell", "shell"), ("docker", "docker"), *K8S_MODES]:
            m = self.interleaved(
                one=lambda: self.runner(executor, one, empty)[0],
                many=lambda: self.runner(executor, many, empty)[0],
                one_before=lambda: self.runner(executor, one, empty, binary=before)[0],
                many_before=lambda: self.runner(executor, many, empty, binary=before)[0])
            mine, base = (m["many"] - m["one"]) / n, (m["many_before"] - m["one_before"]) / n
            base_is = "the shell executor's own build: it measures usage with no process of its own" if executor == "shell" else "the same runner without the sampler and the cgroup reads"
            self.row(f"per-step overhead with usage measured, {n} × `true`", where, f"{mine * 1000:.2f} ms",
                     f"{base * 1000:.2f} ms ({base_is})", f"{(mine - base) * 1000:+.2f} ms", "≤ +1 ms", mine - base <= 0.001)

    def step_isolation(self):
        """What keeping the steps' user apart from the runner's side costs a
        step: the per-step overhead with a step user whose steps the agent
        starts as that uid (the channel as root), against the same user
        with every process as it (Docker: `--user 0:0`, root, is one trust
        domain; Kubernetes: `--step-isolation off`), in the same run."""
        n = 10 if self.quick else 100
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        many = self.steps("many", [("s0", "true")] + [(f"s{i + 1}", "true") for i in range(n)])
        cases = [("docker", "docker", ["--user", "65534:65534"], ["--user", "0:0"], "`--user 0:0`: no user apart"),
                 *[(executor, where, ["--run-as-user", "65534", "--run-as-group", "65534"],
                    ["--run-as-user", "65534", "--run-as-group", "65534", "--step-isolation", "off"],
                    "`--step-isolation off`: the same user for every process") for executor, where in K8S_MODES]]
        for executor, where, apart, together, base_is in cases:
            m = self.interleaved(
                one=lambda: self.runner(executor, one, empty, extra=apart)[0],
                many=lambda: self.runner(executor, many, empty, extra=apart)[0],
                one_base=lambda: self.runner(executor, one, empty, extra=together)[0],
                many_base=lambda: self.runner(executor, many, empty, extra=together)[0])
            mine, base = (m["many"] - m["one"]) / n, (m["many_base"] - m["one_base"]) / n
            self.row(f"per-step overhead with the steps' user apart, {n} × `true`", where, f"{mine * 1000:.2f} ms",
                     f"{base * 1000:.2f} ms ({base_is})", f"{(mine - base) * 1000:+.2f} ms", f"≤ +1 ms, ≤ {STEP_MOST * 1000:.0f} ms",
                     mine - base <= 0.001 and mine <= STEP_MOST)

    def arm64(self):
        """The emulated arm64 image (issue 56): the per-step overhead
        against `docker exec` of `true` on the same image, and outputs
        back compressed by the aarch64 compressor against the image's own
        `gzip -1` through `docker exec`, in the same run. Emulation makes
        absolute times meaningless; the ratios carry over."""
        image = os.environ.get("KNOTLESS_TEST_IMAGE_ARM64", "")
        if not image:
            print("  (arm64 needs the arm64 image and qemu: scripts/prepare-engine.sh makes them where it can)", flush=True)
            return
        n = 10 if self.quick else 100
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        many = self.steps("many", [("s0", "true")] + [(f"s{i + 1}", "true") for i in range(n)])
        cid = self.sh(["docker", "run", "-d", "--network", "none", "-v", "/vol", image, *KEEPALIVE]).strip()
        try:
            m = self.interleaved(
                cli=lambda: self.timed(f"for i in $(seq {n}); do docker exec {cid} true; done", shell=True),
                one=lambda: self.runner("docker", one, empty, image=image)[0],
                many=lambda: self.runner("docker", many, empty, image=image)[0])
            cli, mine = m["cli"] / n, (m["many"] - m["one"]) / n
            self.row(f"per-step overhead, {n} × `true`, arm64 image under qemu", "docker", f"{mine * 1000:.1f} ms",
                     f"`docker exec` {cli * 1000:.1f} ms on the same image", f"{per(mine, cli):.2f}× CLI", "≤ 0.25× CLI", per(mine, cli) <= 0.25)

            src = self.source_tree()
            size = getattr(self, "source_bytes", 0)
            gen_out = self.steps("gen-out-tree", [("gen", 'cp -R /steps/. "$OUTPUTS_DIR"/')])
            self.sh(f"docker exec {cid} sh -c 'rm -rf /vol/o && mkdir -p /vol/o'")
            self.sh(f"tar c -C {src} . | docker exec -i {cid} tar x -C /vol/o")
            dest = self.tmp / "base-out"

            def outputs_phase():
                shutil.rmtree(self.tmp / "out", ignore_errors=True)
                self.settle(src)
                self.runner("docker", gen_out, empty, ["--steps-dir", str(src), "--compression", "always"], image=image)
                return self.phases()[1]

            def base_out():
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir()
                return self.timed(f"docker exec {cid} sh -c 'tar c -C /vol/o . | gzip -1' | gzip -dc | tar x -C {dest}", shell=True)
            m = self.interleaved(base=base_out, ours=outputs_phase)
            self.row(f"outputs back compressed: {size >> 20} MiB source tree, arm64 image under qemu", "docker", f"{m['ours']:.2f} s",
                     f"{m['base']:.2f} s (`docker exec … tar c | gzip -1` with the image's gzip)", f"{per(m['ours'], m['base']):.2f}×", "≤ 1× (no slower)", m["ours"] <= m["base"])
        finally:
            self.remove(cid)

    def transfer(self):
        big = (1 << 20) if self.quick else (1 << 30)
        small = 200 if self.quick else 20000
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        big_src, small_src = self.checkout("big", big_bytes=big), self.checkout("small", small_files=small)
        cases = [(f"{big >> 20} MiB as one file", big_src, f"head -c {big} /dev/urandom > @DEST@/big.bin", None),
                 (f"{small} small files", small_src, 'cp -r "$STEPS_DIR"/. @DEST@/', small_src)]
        # Five at least: on two cores a 1 GiB copy through the test
        # cluster shares the machine with dockerd, the shim and the
        # cluster's relay, and the same copy took 3.7 to 7.2 s (medians of
        # three missed by chance on either side).
        reps = 1 if self.quick else max(self.reps, 5)
        if not self.can_drop_caches:
            self.notes.append("Not run as root: the transfer rows could not drop the kernel's caches between repetitions (see `settle` in the script), so rows with many files depend on what the repetition before them deleted.")
        for executor, where in [("docker", "docker"), *K8S_MODES]:
            cid, tool, exec_in, exec_out, v5_base = self.baseline_exec(executor)
            try:
                for label, src, make, steps_dir in cases:
                    # Checkout in: the runner's own start phase (environment
                    # + checkout), less the same start with an empty checkout.
                    rss = []

                    def base_in():
                        self.sh(f"{exec_out} sh -c 'rm -rf /vol/in && mkdir /vol/in'")
                        self.settle(src)
                        return self.timed(f"tar c -C {src} . | {exec_in} tar x -C /vol/in", shell=True)

                    def start_with(checkout):
                        self.settle(checkout)
                        rss.append(self.runner(executor, one, checkout)[1])
                        return self.phases()[0]
                    m = self.interleaved(reps, base=base_in, empty=lambda: start_with(empty), full=lambda: start_with(src))
                    ours = max(m["full"] - m["empty"], 0.0)
                    self.row(f"checkout in: {label}", where, f"{ours:.2f} s", f"{m['base']:.2f} s (`tar c | {tool} exec -i … tar x`){v5_base}", f"{per(ours, m['base']):.2f}×", "≤ 1× (no slower)", ours <= m["base"] * 1.05, f"runner peak RSS {max(rss) >> 20} MiB")
                    if executor == "docker":
                        self.memory.append((f"checkout {label}", max(rss)))

                    # Outputs back: a step makes the data (the big file from
                    # /dev/urandom, the small files copied from the steps
                    # folder) and the runner's own outputs phase is the time.
                    # The baseline copies the same data out of its container.
                    extra = ["--steps-dir", str(steps_dir)] if steps_dir else []
                    gen_out = self.steps("gen-out", [("gen", make.replace("@DEST@", '"$OUTPUTS_DIR"'))])
                    self.sh(f"{exec_out} sh -c 'rm -rf /vol/o && mkdir -p /vol/o'")
                    if steps_dir:
                        self.sh(f"tar c -C {steps_dir} . | {exec_in} tar x -C /vol/o")
                    else:
                        self.sh(f"{exec_out} sh -c '{make.replace('@DEST@', '/vol/o')}'")
                    dest = self.tmp / "base-out"

                    def outputs_phase():
                        shutil.rmtree(self.tmp / "out", ignore_errors=True)
                        self.settle(*([steps_dir] if steps_dir else []))
                        self.runner(executor, gen_out, empty, extra)
                        return self.phases()[1]

                    def base_out():
                        shutil.rmtree(dest, ignore_errors=True)
                        dest.mkdir()
                        # The step just wrote the executor's data, so the
                        # baseline's is read once to be as warm.
                        self.settle(f"{exec_out} tar c -C /vol/o .")
                        return self.timed(f"{exec_out} tar c -C /vol/o . | tar x -C {dest}", shell=True)
                    m = self.interleaved(reps, base=base_out, ours=outputs_phase)
                    self.row(f"outputs back: {label}", where, f"{m['ours']:.2f} s", f"{m['base']:.2f} s (`{tool} exec … tar c | tar x`){v5_base}", f"{per(m['ours'], m['base']):.2f}×", "≤ 1× (no slower)", m["ours"] <= m["base"] * 1.05)
            finally:
                if cid:
                    self.remove(cid)

    def logs(self):
        size = (1 << 20) if self.quick else (1 << 30)
        empty = self.checkout("empty")
        flood = self.steps("flood", [("flood", f"{YES} | head -c {size}")])
        for executor, where in [("docker", "docker"), *K8S_MODES]:
            cid = self.container() if executor == "docker" else None
            exec_cmd = f"docker exec {cid}" if cid else f"kubectl exec {self.baseline_pod()} --"
            try:
                base = self.median(lambda: self.timed(f"{exec_cmd} sh -c '{YES} | head -c {size}' > /dev/null", shell=True))
            finally:
                if cid:
                    self.remove(cid)
            # The step's own duration in the result: from its exec to its
            # exit status, every byte of log written.
            def flood_step():
                _, rss, _ = self.runner(executor, flood, empty)
                step = json.loads((self.tmp / "result.json").read_text())["steps"][0]
                return step["durationMs"] / 1000, rss
            ours, rss = self.median(flood_step)
            mbps = per(size, ours) / 1e6
            bmbps = per(size, base) / 1e6
            self.row(f"log streaming: one step printing {size >> 20} MiB", where, f"{mbps:.0f} MB/s", f"{bmbps:.0f} MB/s (`{'docker' if cid else 'kubectl'} exec` to /dev/null)", f"{per(mbps, bmbps):.2f}×", "≥ 0.8× throughput", mbps >= 0.8 * bmbps, f"runner peak RSS {rss >> 20} MiB")
            if executor == "docker":
                self.memory.append((f"{size >> 20} MiB of log", rss))

    def masking(self):
        """Log streaming with ten secrets masked against the same run with
        none, taken in turn (docker, so the engine is the same for both)."""
        size = (1 << 20) if self.quick else (256 << 20)
        empty = self.checkout("empty")
        flood = self.steps("flood", [("flood", f"{YES} | head -c {size}")])
        names = [f"BENCH_SECRET_{i}" for i in range(10)]
        for name in names:
            self.env[name] = secrets.token_urlsafe(18)
        with_secrets = [a for n in names for a in ("--secret", n)]

        def throughput(extra):
            self.runner("docker", flood, empty, extra=extra)
            step = json.loads((self.tmp / "result.json").read_text())["steps"][0]
            return size / (step["durationMs"] / 1000) / 1e6

        m = self.interleaved(plain=lambda: throughput(()), masked=lambda: throughput(with_secrets))
        ratio = m["masked"] / m["plain"]
        self.row(f"log streaming with ten secrets masked: one step printing {size >> 20} MiB", "docker", f"{m['masked']:.0f} MB/s", f"{m['plain']:.0f} MB/s (the same run without secrets)", f"{ratio:.2f}×", "≥ 0.8× throughput", ratio >= 0.8, "each secret in 11 forms (plain, 6 base64, 2 hex, URL)")

    def events(self):
        """Log streaming with `--events FILE` (every output chunk also a JSON
        line) against the same run without, taken in turn (docker)."""
        size = (1 << 20) if self.quick else (256 << 20)
        empty = self.checkout("empty")
        flood = self.steps("flood", [("flood", f"{YES} | head -c {size}")])
        events = self.tmp / "events.jsonl"

        def throughput(extra):
            self.runner("docker", flood, empty, extra=extra)
            step = json.loads((self.tmp / "result.json").read_text())["steps"][0]
            return size / (step["durationMs"] / 1000) / 1e6

        m = self.interleaved(plain=lambda: throughput(()), events=lambda: throughput(("--events", str(events))))
        events.unlink(missing_ok=True)
        ratio = m["events"] / m["plain"]
        self.row(f"log streaming with --events: one step printing {size >> 20} MiB", "docker", f"{m['events']:.0f} MB/s", f"{m['plain']:.0f} MB/s (the same run without events)", f"{ratio:.2f}×", "≥ 0.8× throughput", ratio >= 0.8, "every chunk also a JSON line in the events file")

    def memory_row(self):
        small = self.checkout("mem100", big_bytes=(1 << 20) if self.quick else (100 << 20))
        one = self.steps("one", [("s0", "true")])
        _, rss, _ = self.runner("docker", one, small)
        self.memory.insert(0, (f"checkout {'1' if self.quick else '100'} MiB", rss))
        peak = max(r for _, r in self.memory)
        low = min(r for _, r in self.memory)
        detail = ", ".join(f"{k}: {r >> 20} MiB" for k, r in self.memory)
        if not self.gnu_time:
            detail += " (no GNU time here: each figure is at least this script's own peak)"
        self.row("runner memory (peak RSS of runner-cli, docker)", "docker", f"{peak >> 20} MiB", "64 MiB budget", f"{peak / (64 << 20):.2f}× budget", "≤ 64 MiB, flat across sizes", peak <= (64 << 20) and peak - low <= (16 << 20), detail)

    def header_bomb(self):
        """Runner memory when a step's own `tar` sends a header declaring a
        600 MiB long name, against the same run bringing 1 MiB of outputs."""
        co = self.checkout("bomb")
        (co / "bomb.tar").write_bytes(long_name_bomb(600 << 20))
        fake = "cat /work/bomb.tar; head -c 1048576 /dev/zero"
        bomb = self.steps("bomb", [("replace-tar", f"rm -f /bin/tar && printf '#!/bin/sh\\n%s\\n' '{fake}' > /bin/tar && chmod +x /bin/tar")])
        normal = self.steps("normal", [("write", 'head -c 1048576 /dev/zero > "$OUTPUTS_DIR/one-mib"')])
        normal_rss = statistics.median(self.runner("k8s", normal, co)[1] for _ in range(self.reps))
        bomb_rss = statistics.median(self.runner("k8s", bomb, co, ok_codes=(3,))[1] for _ in range(self.reps))
        err = json.loads((self.tmp / "result.json").read_text())["error"] or ""
        self.row("runner memory under a header bomb (peak RSS)", "k8s (test cluster)", f"{bomb_rss / (1 << 20):.1f} MiB",
                 f"{normal_rss / (1 << 20):.1f} MiB (1 MiB of outputs, same run)", f"{per(bomb_rss, normal_rss):.2f}×",
                 "≤ 1.1× (flat whatever the stream declares)", bomb_rss <= normal_rss * 1.1, f"refused: {err[:120]}")

    def engine_call(self, method, path, body=None, content_type="application/json"):
        """Seconds of one Docker API call, sent straight to the engine's socket; fails on an error status."""
        sock = self.env.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")

        class Conn(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(sock)
        conn = Conn("engine")
        t = time.perf_counter()
        conn.request(method, path, body=body, headers={"Content-Type": content_type})
        r = conn.getresponse()
        r.read()
        dt = time.perf_counter() - t
        conn.close()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}")
        return dt

    def start_to_first_step(self):
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        # Each repetition is under a second and the engine's start time
        # drifts: interleave the two and take more of them than elsewhere.
        reps = 1 if self.quick else max(self.reps, 9)

        def container_start():
            t = time.perf_counter()
            cid = self.sh(["docker", "run", "-d", "--network", "none", IMAGE, *KEEPALIVE]).strip()
            dt = time.perf_counter() - t
            self.remove(cid)
            return dt
        m = self.interleaved(reps, base=container_start, first=lambda: self.runner("docker", one, empty, first_step=True)[2])
        base, first = m["base"], m["first"]
        added = (first - base) * 1000
        self.row("start to first step", "docker", f"{first * 1000:.0f} ms", f"{base * 1000:.0f} ms (`docker run -d`)", f"+{added:.0f} ms", "≤ 100 ms added", added <= 100)
        self.start_breakdown(reps)

        def pod_start():
            name = f"bench-start-{time.monotonic_ns()}"
            manifest = self.job_manifest(name)
            t = time.perf_counter()
            self.sh(["kubectl", "create", "-f", str(manifest)])
            self.sh(["kubectl", "wait", "--for=condition=Ready", "pod", "-l", f"job-name={name}", "--timeout=120s"])
            dt = time.perf_counter() - t
            self.sh(["kubectl", "delete", "job", name, "--cascade=foreground"])
            return dt
        for executor, where in K8S_MODES:
            m = self.interleaved(reps, base=pod_start, first=lambda: self.runner(executor, one, empty, first_step=True)[2])
            base, first = m["base"], m["first"]
            added = (first - base) * 1000
            self.row("start to first step", where, f"{first * 1000:.0f} ms", f"{base * 1000:.0f} ms (`kubectl create` + `kubectl wait` Ready){V5_BASE if executor == 'k8s-v4' else ''}", f"{added:+.0f} ms", "≤ 100 ms added", added <= 100)

    def service_start(self):
        """Start to first step with one service (busybox httpd, ready once
        port 8080 listens), against the engine's CLI doing the same: the
        service and the step container on one network (docker) or in one
        pod (kubectl), then the same listener check until it passes."""
        empty = self.checkout("empty")
        one = self.steps("one", [("s0", "true")])
        reps = 1 if self.quick else max(self.reps, 5)
        serve = "exec httpd -f -p 8080 -h /tmp"
        flags = ["--service", f"web={IMAGE}", "--service-command", f"web={serve}", "--service-ready", "web=tcp:8080"]

        def until(cmd):
            # The check the executor runs, asked as often as the CLI can.
            deadline = time.monotonic() + 60
            while subprocess.run(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd} never passed")

        def docker_base():
            net = f"bench-svc-{time.monotonic_ns()}"
            t = time.perf_counter()
            self.sh(["docker", "network", "create", "--internal", net])
            web = self.sh(["docker", "run", "-d", "--network", net, "--network-alias", "web", "--entrypoint", "sh", IMAGE, "-ec", serve]).strip()
            main = self.sh(["docker", "run", "-d", "--network", net, IMAGE, *KEEPALIVE]).strip()
            until(["docker", "exec", web, "sh", "-c", LISTENING_8080])
            dt = time.perf_counter() - t
            self.sh(["docker", "rm", "-f", "-v", web, main])
            self.sh(["docker", "network", "rm", net])
            return dt
        m = self.interleaved(reps, base=docker_base, first=lambda: self.runner("docker", one, empty, extra=flags, first_step=True)[2])
        added = (m["first"] - m["base"]) * 1000
        self.row("start to first step, one service", "docker", f"{m['first'] * 1000:.0f} ms",
                 f"{m['base'] * 1000:.0f} ms (`docker network create` + two `docker run -d` + `docker exec` check until it passes)",
                 f"{added:+.0f} ms", "≤ 100 ms added", added <= 100)

        def pod_base():
            name = f"bench-svc-{time.monotonic_ns()}"
            manifest = self.job_manifest(name)
            text = manifest.read_text().replace("      volumes:", f"""      - name: web
        image: {IMAGE}
        command: ["sh", "-ec", {json.dumps(serve)}]
      volumes:""")
            manifest.write_text(text)
            t = time.perf_counter()
            self.sh(["kubectl", "create", "-f", str(manifest)])
            self.sh(["kubectl", "wait", "--for=condition=Ready", "pod", "-l", f"job-name={name}", "--timeout=120s"])
            pod = self.sh(["kubectl", "get", "pods", "-l", f"job-name={name}", "-o", "jsonpath={.items[0].metadata.name}"]).strip()
            until(["kubectl", "exec", pod, "-c", "main", "--", "sh", "-c", LISTENING_8080])
            dt = time.perf_counter() - t
            self.sh(["kubectl", "delete", "job", name, "--cascade=foreground"])
            return dt
        for executor, where in K8S_MODES:
            m = self.interleaved(reps, base=pod_base, first=lambda: self.runner(executor, one, empty, extra=flags, first_step=True)[2])
            added = (m["first"] - m["base"]) * 1000
            self.row("start to first step, one service", where, f"{m['first'] * 1000:.0f} ms",
                     f"{m['base'] * 1000:.0f} ms (`kubectl create` of a two-container Job + `kubectl wait` Ready + `kubectl exec` check until it passes){V5_BASE if executor == 'k8s-v4' else ''}",
                     f"{added:+.0f} ms", "≤ 100 ms added", added <= 100)

    def start_breakdown(self, reps):
        """The engine calls the executor makes beyond create and start, each sent bare."""
        names = ["work", "steps", "outputs", ".knotless"]
        folders = self.tmp / "run-folders"
        for d in names:
            (folders / d).mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["tar", "-C", str(folders), "-cf", "-", *names], check=True, capture_output=True).stdout
        volumes = [a for d in names for a in ("-v", f"/{d}")]
        version, image, upload = [], [], []
        for _ in range(reps):
            cid = self.sh(["docker", "run", "-d", "--network", "none", *volumes, IMAGE, *KEEPALIVE]).strip()
            try:
                version.append(self.engine_call("GET", "/version"))
                image.append(self.engine_call("GET", f"/images/{IMAGE}/json"))
                upload.append(self.engine_call("PUT", f"/containers/{cid}/archive?path=/", tar, "application/x-tar"))
            finally:
                self.remove(cid)
        ms = lambda xs: f"{statistics.median(xs) * 1000:.1f} ms"  # noqa: E731
        self.notes.append(
            "Docker start to first step, the engine calls the executor makes beyond create and start, each sent bare "
            f"from this script (median of {reps}): `GET /version` (API version negotiation) {ms(version)}, "
            f"`GET /images/…/json` (the image check) {ms(image)}, `PUT /containers/…/archive` of the empty run folders "
            f"(the checkout upload) {ms(upload)}. The rest of the added time is runner-cli's own start; the baseline's "
            "CLI start is inside the baseline.")

    def runners_at_once(self, n, executor, steps, workdir, tag):
        """`n` runner-cli runs at once, each its own (`tag` and its number):
        each one's `runner` tuple or its exception, and the wall time."""
        results = [None] * n

        def one(i):
            try:
                results[i] = self.runner(executor, steps, workdir, tag=f"{tag}{i}")
            except Exception as e:  # noqa: BLE001 - reported in the row
                results[i] = e
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return results, time.perf_counter() - t

    def concurrency(self):
        n = 3 if self.quick else 20
        empty = self.checkout("empty")
        steps = self.steps("conc", [("a", "echo one"), ("b", "sleep 1; echo two")])
        results, wall = self.runners_at_once(n, "k8s", steps, empty, "")
        ok = [r for r in results if isinstance(r, tuple)]
        rss = statistics.median(r[1] for r in ok) if ok else 0
        failed = [str(r) for r in results if not isinstance(r, tuple)]
        self.row(f"concurrency: {n} runs at once", "k8s (test cluster)", f"{len(ok)}/{n} succeeded in {wall:.1f} s", "—", f"{int(rss) >> 20} MiB per run (median peak RSS)", "all succeed", len(ok) == n,
                 f"first failure: {failed[0][:300]}" if failed else "")

    def many_runs(self):
        """N runs at once from one embedding process (the many_runs
        example, through the library, on a multi-threaded runtime with 1
        and 2 workers) against the same N as runner-cli processes at once,
        each step printing `size` bytes; and one run alone, for the per-step
        p99 bound."""
        n, steps_n, size = (4, 3, 64 << 10) if self.quick else (50, 10, 1 << 20)
        example = self.bin_dir / "examples" / "many_runs"

        flood = (1 << 20) if self.quick else (32 << 20)

        def embedded(backend, runs, workers, flooding=False):
            env = dict(self.env, KNOTLESS_WORKERS=str(workers), KNOTLESS_TEST_IMAGE=IMAGE)
            if flooding:
                env["KNOTLESS_FLOOD"] = str(flood)
            t = time.perf_counter()
            out = subprocess.run([str(example), backend, str(runs), str(steps_n), str(size)], env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            if out.returncode != 0:
                raise RuntimeError(f"many_runs {backend} exited {out.returncode}: {out.stderr[-2000:]}")
            fields = dict(f.split("=", 1) for f in out.stdout.split())
            return wall, fields

        script = f"head -c {size} /dev/zero | tr '\\\\0' a; echo"
        steps = self.steps("many", [(f"print-{i}", script) for i in range(steps_n)])
        empty = self.checkout("empty")
        def served():
            # The test cluster counts what it served by verb and resource.
            return json.loads(self.sh(["kubectl", "get", "--raw", "/knotless/requests"]))

        def made(before, after, runs):
            return {k: (after[k] - before.get(k, 0)) / runs for k in after if after[k] > before.get(k, 0)}

        for backend, where in [("docker", "docker"), ("k8s", "k8s (test cluster)")]:
            try:
                if backend == "k8s":
                    # Permissions are checked once per process: the run alone
                    # and the batch each check them once.
                    before = served()
                    embedded(backend, 1, 2)
                    one = made(before, served(), 1)
                    before = served()
                    embedded(backend, n, 2)
                    each = made(before, served(), n)
                    events = each.pop("list events", 0), one.pop("list events", 0)
                    reviews = one.pop("create selfsubjectaccessreviews", 0)
                    each.pop("create selfsubjectaccessreviews", None)
                    # Averaged over the runs, a watch that ended and was
                    # made again, or a gone-wait the list answered, moves a
                    # count by a fraction; a request per step would move it
                    # by the steps.
                    same = all(abs(each.get(k, 0) - one.get(k, 0)) <= 0.1 for k in set(each) | set(one))
                    shown = ", ".join(f"{k} {v:g}" for k, v in sorted(each.items()))
                    self.row(f"API requests per run, {n} runs of {steps_n} steps at once from one process", where,
                             f"{sum(each.values()) + events[0]:g} a run: {shown}, list events {events[0]:g}",
                             f"one run alone: {sum(one.values()) + events[1]:g}; and {reviews:g} permission reviews once per process",
                             "the same per run" if same else "differs",
                             "a fixed number per run, none per step beyond the channel; no poll that grows with the runs",
                             same and events[0] <= 4)
                _, alone = embedded(backend, 1, 2)
                single_p99 = float(alone["step_p99"].rstrip("ms"))
                results, processes = self.runners_at_once(n, backend, steps, empty, "many")
                procs_ok = sum(isinstance(r, tuple) for r in results)
                procs_rss = sum(r[1] for r in results if isinstance(r, tuple))
                plain_p99 = None
                for workers in (2, 1):
                    wall, got = embedded(backend, n, workers)
                    if workers == 2:
                        plain_p99 = float(got["step_p99"].rstrip("ms"))
                    rss = int(got["peak_rss"].rstrip("MiB"))
                    p99 = float(got["step_p99"].rstrip("ms"))
                    ok = int(got["succeeded"])
                    rss_bound = 64 + n
                    self.row(f"{n} runs at once from one process, {steps_n} steps of {size >> 10} KiB each ({workers} worker{'s' if workers > 1 else ''})", where,
                             f"{ok}/{n} succeeded, every byte once, in {wall:.1f} s; peak RSS {rss} MiB; step p50 {got['step_p50']}, p99 {got['step_p99']}",
                             f"{procs_ok}/{n} runner-cli processes in {processes:.1f} s, {procs_rss >> 20} MiB RSS in all; one run alone: step p99 {single_p99:.0f} ms",
                             f"{wall / processes:.2f}× the time; p99 {p99 / max(single_p99, 1.0):.1f}× alone",
                             f"all succeed; RSS ≤ {rss_bound} MiB (64 + 1 a run); p99 ≤ 4× alone",
                             ok == n and rss <= rss_bound and p99 <= 4 * max(single_p99, 1.0))
                # The same runs with the first one flooding: every step of it
                # prints `flood` bytes (past the log's limit, dropped by
                # design); the figures are the other runs'.
                wall, got = embedded(backend, n, 2, flooding=True)
                p99 = float(got["step_p99"].rstrip("ms"))
                ok = int(got["succeeded"])
                self.row(f"{n} runs at once from one process, one flooding ({steps_n} steps of {flood >> 20} MiB), the others' steps (2 workers)", where,
                         f"{ok}/{n} succeeded in {wall:.1f} s; the others' step p50 {got['step_p50']}, p99 {got['step_p99']}",
                         f"the same runs with no flood: p99 {plain_p99:.0f} ms; one run alone: p99 {single_p99:.0f} ms",
                         f"p99 {p99 / max(plain_p99 or 1.0, 1.0):.2f}× no flood, {p99 / max(single_p99, 1.0):.1f}× alone",
                         "all succeed; p99 ≤ 4× alone",
                         ok == n and p99 <= 4 * max(single_p99, 1.0))
            except Exception as e:  # noqa: BLE001 - reported in the row
                self.row(f"{n} runs at once from one process", where, "failed", "—", "—", "all succeed", False, str(e)[:300])

    def cache(self):
        files = 80 if self.quick else 8000
        src = self.tmp / "cache-src"
        src.mkdir(exist_ok=True)
        for i in range(files):
            sub = src / f"d{i // 500}"
            sub.mkdir(exist_ok=True)
            (sub / f"f{i}").write_bytes(os.urandom(64 << 10))
        empty = self.checkout("empty")
        mib = files * 64 // 1024
        # Where a cache lives decides what it is written to, so each row's
        # baseline writes to the same kind of place: on Docker an absolute
        # cache path gets a volume of its own; on Kubernetes a path in the
        # checkout is on the run's emptyDir, and an absolute one is in the
        # container's root filesystem (an emptyDir there would hide what the
        # image holds at that path).
        variants = [("docker", "docker", "/cache", "/vol/cache", "")]
        for executor, where in K8S_MODES:
            variants.append((executor, where, ".cache/bench", "/vol/cache", " in /work (emptyDir)"))
            variants.append((executor, where, "/cache", "/cache", " at /cache (root filesystem)"))
        for executor, where, path, base_dir, label in variants:
            cache_dir = self.tmp / f"caches-{executor}-{len(label)}"
            # Seed the cache with one run that copies the data in from the steps folder.
            seed = self.steps("seed", [("seed", f"mkdir -p {path} && cp -r \"$STEPS_DIR\"/. {path}/")])
            extra = ["--cache", f"bench={path}", "--cache-dir", str(cache_dir), "--cache-max", "2g"]
            self.runner(executor, seed, empty, [*extra, "--steps-dir", str(src)])
            touch = self.steps("touch", [("use", f"test -d {path}/d0")])

            def warm():
                self.settle(cache_dir)
                self.runner(executor, touch, empty, extra)
                r = json.loads((self.tmp / "result.json").read_text())["caches"][0]
                assert r["hit"] and r["saved"], r
                return r["msIn"] / 1000, r["msOut"] / 1000
            cid, tool, exec_in, exec_out, v5_base = self.baseline_exec(executor)
            dest = self.tmp / "cache-back"
            try:
                def base_in():
                    self.sh(f"{exec_out} sh -c 'rm -rf {base_dir} && mkdir {base_dir}'", shell=True)
                    self.settle(src)
                    return self.timed(f"tar c -C {src} . | {exec_in} tar x -C {base_dir}", shell=True)

                def base_out():
                    shutil.rmtree(dest, ignore_errors=True)
                    dest.mkdir()
                    self.settle(f"{exec_out} tar c -C {base_dir} .")
                    return self.timed(f"{exec_out} tar c -C {base_dir} . | tar x -C {dest}", shell=True)

                # Taken in turn within each repetition: both sides write to
                # a filesystem whose speed drifts (fuse-overlayfs), and the
                # drift must fall on both alike. One warm run gives both of
                # ours: `in` takes it, `out` reads it.
                last = {}

                def ours_in():
                    last["in"], last["out"] = warm()
                    return last["in"]
                m = self.interleaved(ours_in=ours_in, base_in=base_in, ours_out=lambda: last["out"], base_out=base_out)
                self.sh(f"{exec_out} rm -rf {base_dir}", shell=True)
            finally:
                if cid:
                    self.remove(cid)
            shutil.rmtree(cache_dir, ignore_errors=True)
            ours_in, b_in, ours_out, b_out = m["ours_in"], m["base_in"], m["ours_out"], m["base_out"]
            self.row(f"warm cache{label}, {mib} MiB of {files} files: in", where, f"{ours_in:.2f} s", f"{b_in:.2f} s (`tar c | {tool} exec -i … tar x -C {base_dir}`){v5_base}", f"{per(ours_in, b_in):.2f}×", "≤ 1× (no slower)", ours_in <= b_in * 1.05)
            self.row(f"warm cache{label}, {mib} MiB of {files} files: out", where, f"{ours_out:.2f} s", f"{b_out:.2f} s (`{tool} exec … tar c -C {base_dir} | tar x`){v5_base}", f"{per(ours_out, b_out):.2f}×", "≤ 1× (no slower)", ours_out <= b_out * 1.05)

    # -- report ----------------------------------------------------------
    def report(self, path, partial=False):
        cpu = ""
        try:
            cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        except (OSError, StopIteration):
            pass
        engine = self.sh(["docker", "version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})"]).strip()
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
        lines = [
            "# Benchmarks",
            "",
            f"Made by `scripts/bench.py{' --quick' if self.quick else ''}` on {time.strftime('%Y-%m-%d')}: {platform.machine()}, "
            f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.system()} {platform.release()}, engine {engine}. "
            f"Medians of {self.reps} runs ({max(self.reps, 5) if not self.quick else 1} for the loopback transfer rows); every baseline was measured in the same run on the same engine. "
            "The k8s rows run on the project's test cluster (`tests/kube-testcluster`), whose pods are containers of the same engine.",
            "",
            "Before every timed transfer the script writes back and drops the kernel's clean caches and reads the source and the tools "
            "back in, then waits until the machine's CPUs are idle (`settle`, `quiet`: a deleted file's blocks are discarded after `unlink` returns); the baselines write to a volume, as the executors' run folders are volumes; peak RSS is "
            + ("GNU time's figure for runner-cli alone." if self.gnu_time else "the child's `ru_maxrss`, an upper bound that includes this script's own peak."),
            "",
            "| measurement | where | executor | baseline in the same run | ratio | target | met | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        if partial:
            lines += ["", "_This run is still going or was stopped: the rows above are all it measured._"]
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        Path(path).write_text("\n".join(lines) + "\n")
        if not partial:
            print(f"wrote {path}")

    def run(self):
        self.memory = []
        # Checked before the builds: a fresh machine has no image, and a
        # failed `docker run` half an hour in says nothing of why.
        if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
            sys.exit(f"bench.py: the image {IMAGE} is not on the engine; run scripts/prepare-engine.sh first (it builds it), or set KNOTLESS_TEST_IMAGE to an image that has busybox")
        if not self.quick:
            subprocess.run(["cargo", "build", "--release", "-p", "runner-cli", "-p", "kube-testcluster", "-p", "knotless-link", "--bin", "runner-cli", "--bin", "kube-testcluster", "--bin", "knotless-link"], cwd=ROOT, check=True)
            subprocess.run(["cargo", "build", "--release", "-p", "runner-cli", "--example", "many_runs"], cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", *([] if self.quick else ["--release"]), "-p", "executor-docker", "-p", "executor-k8s", "--example", "bare_docker_exec", "--example", "bare_kube_exec"], cwd=ROOT, check=True)
        if self.quick:
            subprocess.run(["cargo", "build", "-p", "runner-cli", "-p", "kube-testcluster", "-p", "knotless-link"], cwd=ROOT, check=True)
            subprocess.run(["cargo", "build", "-p", "runner-cli", "--example", "many_runs"], cwd=ROOT, check=True)
        self.start_cluster()
        try:
            parts = [self.per_step, self.usage_cost, self.step_isolation, self.arm64, self.transfer, self.logs, self.masking, self.events, self.memory_row, self.header_bomb, self.start_to_first_step, self.service_start, self.concurrency, self.many_runs, self.cache, self.link_per_step, self.link_checkout, self.link_start]
            if self.args.only:
                parts = [p for p in parts if p.__name__ in self.args.only]
            for part in parts:
                print(f"== {part.__name__}", flush=True)
                part()
        finally:
            self.stop_links()
            self.stop_cluster()
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.report(self.args.out)


K8S_MODES = [("k8s", "k8s (test cluster)"), ("k8s-v4", "k8s (test cluster, v4 only)")]
# What `executor_core::service::listening_probe(8080)` runs: a LISTEN row
# for port 8080 (1F90) in the kernel's socket tables, with sh builtins only.
LISTENING_8080 = ("for t in /proc/net/tcp /proc/net/tcp6; do [ -r \"$t\" ] || continue; "
                  "while read -r _ l _ s _; do case \"$l $s\" in *:1F90\\ 0A) exit 0;; esac; done < \"$t\"; done; exit 1")
V5_BASE = " (kubectl on the v5 cluster: it never speaks v4)"


def long_name_bomb(size):
    """A GNU long-name header that declares `size` bytes and brings none."""
    h = bytearray(512)
    h[0:13] = b"././@LongLink"
    h[100:107] = b"0000644"
    h[124:135] = f"{size:011o}".encode()
    h[136:147] = b"00000000000"
    h[156] = ord("L")
    h[257:265] = b"ustar  \0"
    h[148:156] = b"        "
    h[148:155] = f"{sum(h):06o}\0".encode()
    return bytes(h)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repetition, to keep the script working (CI)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (median)")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"), help="where the markdown table goes")
    parser.add_argument("--only", nargs="*", help="run only these parts (per_step usage_cost transfer logs masking events memory_row header_bomb start_to_first_step service_start concurrency many_runs cache link_per_step link_checkout link_start)")
    Bench(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
