"""A state-machine test of output folders (docs/design.md, "Output folders").

Random sequences of cheap commands into one --out DIR (simulate, ot, wasserstein, gaussian,
reproduce sphere --quick --no-figures, resume), with the user adding files (in DIR and in the
subfolders tokenflow wrote), editing and deleting files, two runs started at once into DIR, and
runs killed mid-way (SIGKILL or SIGTERM). After every step:

- no file of the user's is lost or changed;
- every file under DIR is the user's, listed in DIR/.tokenflow-outputs, or the manifest itself
  (no staging, rollback or lock debris once no process runs, except right after a kill: the next
  run into DIR cleans it up);
- the manifest's records match the files on disk (size and FNV-1a hash), and they are one complete
  run's outputs: the summary.json of the manifest's command and that command's other files;
- a run into a folder of another command is refused (exit 2) and changes nothing; so is a run that
  would replace an edited output or a file of the user's; a run that nothing blocks succeeds.

The seed is fresh each run and printed (TOKENFLOW_TEST_SEED=... replays a failure);
TOKENFLOW_STATE_STEPS sets the steps per sequence.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import CLI

SEED = int(os.environ.get("TOKENFLOW_TEST_SEED") or random.SystemRandom().randrange(2**32))
STEPS = int(os.environ.get("TOKENFLOW_STATE_STEPS", "60"))
SEQUENCES = 3

# What each command writes for sure (the manifest of a complete run lists at least these).
CORE = {
    "simulate": {"initial.npy", "positions.npy", "diagnostics.csv", "summary.json"},
    "ot": {"summary.json", "f.npy", "g.npy", "plan.npy"},
    "wasserstein": {"summary.json"},
    "gaussian": {"summary.json", "times.npy", "means.npy", "covs.npy"},
    "reproduce sphere": {"summary.json", "snapshots/positions.npy", "snapshots/summary.json"},
}
# Names a user may give a file of their own that some command writes too (refused, never replaced).
COLLIDING = ["summary.json", "positions.npy", "f.npy", "means.npy"]
DEBRIS = re.compile(r"^(\.staging-\d+|\.rollback-\d+|.*\.tmp-\d+|\.tokenflow-lock)$")
ENV = dict(os.environ, CI="1", OMP_NUM_THREADS="1")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_manifest(out):
    """(command, {path: (size, hash)}, in_place paths) of DIR/.tokenflow-outputs, or None."""
    path = out / ".tokenflow-outputs"
    if not path.exists():
        return None
    command, files, in_place = None, {}, set()
    lines = [l for l in path.read_text().splitlines() if l and not l.startswith("#")]
    assert lines[0] == "tokenflow-outputs 2", lines[:1]
    for line in lines[1:]:
        kind, rest = line.split(" ", 1)
        if kind == "command":
            command = rest
        elif kind == "file":
            size, _mtime, digest, rel = rest.split(" ", 3)
            files[rel] = (int(size), int(digest, 16))
        elif kind == "inplace":
            in_place.add(rest)
        else:
            assert kind == "dir", line
    return command, files, in_place


def snapshot(out):
    """Every regular file under DIR that is not bookkeeping: path -> bytes."""
    files = {}
    if out.exists():
        for p in out.rglob("*"):
            rel = p.relative_to(out).as_posix()
            if p.is_file() and not p.is_symlink() and not any(DEBRIS.match(part) for part in rel.split("/")):
                files[rel] = p.read_bytes()
    return files


class Folder:
    """One --out DIR and what the test knows of it."""

    def __init__(self, root, rng, inputs):
        self.out = root / "out"
        self.rng = rng
        self.inputs = inputs
        self.user = {}           # path -> bytes: the user's files (edited outputs included)
        self.user_dirs = set()   # folders the user made
        self.debris_ok = False   # right after a kill, until a run into DIR cleans up
        self.log = []
        self.outcomes = {}      # what happened, counted (printed at the end)

    def has_debris(self):
        return self.out.exists() and any(DEBRIS.match(p.name) for p in self.out.rglob("*"))

    # ---- the invariant ---------------------------------------------------------------------------
    def check(self, where):
        ctx = f"seed {SEED}, {where}; steps so far:\n  " + "\n  ".join(self.log[-12:])
        for rel, data in self.user.items():
            p = self.out / rel
            assert p.is_file() and p.read_bytes() == data, f"the user's {rel} was lost or changed ({ctx})"
        if self.debris_ok and any(self.out.glob(".rollback-*")):
            return  # a commit cut by the kill: the next run into DIR undoes or finishes it
        manifest = read_manifest(self.out)
        command, listed, in_place = manifest if manifest else (None, {}, set())
        for p in sorted(self.out.rglob("*")) if self.out.exists() else []:
            rel = p.relative_to(self.out).as_posix()
            if any(DEBRIS.match(part) for part in rel.split("/")):
                assert self.debris_ok, f"debris {rel} with no run killed before ({ctx})"
                continue
            if p.is_dir():
                assert any(p.iterdir()) or rel in self.user_dirs, f"an empty folder {rel} was left ({ctx})"
                continue
            assert rel in self.user or rel in listed or rel in in_place or rel == ".tokenflow-outputs", \
                f"{rel} is neither the user's nor listed in the manifest ({ctx})"
        for rel, (size, digest) in listed.items():
            p = self.out / rel
            if rel in self.user or not p.exists():
                continue  # edited (the user's now) or deleted by the user
            data = p.read_bytes()
            assert (len(data), fnv1a64(data)) == (size, digest), f"{rel} does not match its record ({ctx})"
        if listed:
            assert command in CORE, f"manifest command {command!r} ({ctx})"
            missing = CORE[command] - set(listed)
            assert not missing, f"the manifest of `{command}` lacks {sorted(missing)}: not one complete run ({ctx})"
            summary = self.out / "summary.json"
            if "summary.json" not in self.user and summary.exists():
                assert json.loads(summary.read_text())["command"] == command.split()[0], ctx

    # ---- the commands ------------------------------------------------------------------------------
    def command(self):
        """A random cheap command: (argv without --out, the manifest's command name); often the
        command that owns DIR (a rerun), else any."""
        owner = (read_manifest(self.out) or (None,))[0]
        r = self.rng.random()
        if owner in CORE and self.rng.random() < 0.6:
            r = {"simulate": 0.0, "ot": 0.4, "wasserstein": 0.6, "gaussian": 0.75, "reproduce sphere": 0.85}[owner]
        if r < 0.35:
            args = ["simulate", "--set", "init.n=40", "--set", "run.T=0.05"]
            if self.rng.random() < 0.5:
                args += ["--set", "run.save_every=1"]
            if self.rng.random() < 0.3:
                args += ["--set", "run.checkpoint_every=2"]
            return args, "simulate"
        if r < 0.55:
            x, y = self.inputs
            if self.rng.random() < 0.3 and self.tokenflows("f.npy", "g.npy"):
                x, y = self.out / "f.npy", self.out / "g.npy"  # its own outputs as inputs
            return ["ot", "--x", x, "--y", y], "ot"
        if r < 0.7:
            x, y = self.inputs
            if self.rng.random() < 0.3 and self.tokenflows("initial.npy", "positions.npy"):
                x, y = self.out / "initial.npy", self.out / "positions.npy"  # the user's report
            return ["wasserstein", "--x", x, "--y", y], "wasserstein"
        if r < 0.82:
            return ["gaussian", "--set", "run.T=0.5"], "gaussian"
        if r < 0.9:
            return ["reproduce", "sphere", "--quick", "--no-figures"], "reproduce sphere"
        return ["resume"], "resume"

    def tokenflows(self, *names):
        """Whether these files in DIR are tokenflow's (listed, and not the user's)."""
        listed = (read_manifest(self.out) or (None, {}, set()))[1]
        return all(n in listed and n not in self.user and (self.out / n).exists() for n in names)

    def blocked(self, name, args):
        """Why a run of `name` must be refused, or None when nothing should stop it."""
        manifest = read_manifest(self.out)
        command, listed, in_place = manifest if manifest else (None, {}, set())
        if name == "resume":
            return "resume" if command != "simulate" or "checkpoint.bin" not in in_place else None
        if command not in (None, name):
            return "other"
        if any(rel in self.user for rel in listed):
            return "edited"
        declared = {rel for rel in CORE[name] if "/" not in rel}
        if name == "simulate" and "run.save_every=1" in args:
            declared |= {"trajectory.npy", "times.npy"}
        if any(rel in self.user for rel in declared):
            return "taken"
        if name == "ot" and str(args[2]).startswith(str(self.out)) and command == "ot":
            return "input"
        return None

    def run(self, args, timeout=60):
        return subprocess.run([str(CLI), *map(str, args), "--out", str(self.out)], capture_output=True, text=True,
                              env=ENV, timeout=timeout)

    def step_run(self, i):
        args, name = self.command()
        before, why = snapshot(self.out), self.blocked(name, args)
        owner = (read_manifest(self.out) or (None,))[0]
        had_debris = self.has_debris()
        try:
            r = self.run(args, timeout=5 if name == "resume" else 60)
            code, err = r.returncode, r.stderr.strip()
        except subprocess.TimeoutExpired:  # a resumed long run: stopped like a user would
            code, err = 143, "timeout"
            self.debris_ok = True
        self.log.append(f"{i}: {' '.join(map(str, args))} -> {code} {err[:160]}")
        key = f"{name} -> {code}" + (f" ({why})" if why else "")
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        ctx = f"seed {SEED}, step {i}: {self.log[-1]}"
        if code == 0:
            assert why is None or why == "resume", f"expected a refusal ({why}) ({ctx})"
            self.debris_ok = False
        elif code == 2:
            if self.take_kept_results(err, ctx):
                why = why or "taken at the commit"
            # (A killed commit's debris is undone first: only then may the files change.)
            assert had_debris or snapshot(self.out) == before, f"a refused run changed DIR ({ctx}); steps so far:\n  " + "\n  ".join(self.log[-6:])
            assert err.count("\n") == 0, ctx
            if owner not in (None, name) and name != "resume":
                assert f"holds the outputs of `{owner}`; choose another --out" in err, ctx
            if why in ("other", "edited", "taken", "input"):
                self.debris_ok = False
        else:
            assert code == 143 and name == "resume", f"unexpected exit {code} ({ctx})"
        if code == 2 and name != "resume":
            assert why is not None, f"refused with nothing in the way ({ctx}); steps so far:\n  " + "\n  ".join(self.log[-8:])
        self.check(f"step {i}")

    # ---- the user ------------------------------------------------------------------------------------
    def step_add(self, i):
        folders = [p for p in [self.out, *self.out.rglob("*")] if p.is_dir()
                   and not any(DEBRIS.match(part) for part in p.relative_to(self.out).parts)] \
            if self.out.exists() else [self.out]
        where = self.rng.choice(folders)
        if self.rng.random() < 0.2:
            where = self.out / "notes"
            if not where.exists():
                self.user_dirs.add("notes")
        where.mkdir(parents=True, exist_ok=True)
        name = f"note-{i}.txt"
        if where == self.out and self.rng.random() < 0.25:
            name = self.rng.choice(COLLIDING)
        p = where / name
        if p.exists():
            return
        data = f"the user's {i} {self.rng.random()}\n".encode()
        p.write_bytes(data)
        self.user[p.relative_to(self.out).as_posix()] = data
        self.log.append(f"{i}: user adds {p.relative_to(self.out)}")

    def step_edit(self, i):
        manifest = read_manifest(self.out)
        candidates = sorted(rel for rel in (manifest[1] if manifest else {})
                            if rel not in self.user and (self.out / rel).exists())
        if not candidates:
            return self.step_add(i)
        rel = self.rng.choice(candidates)
        p = self.out / rel
        data = bytearray(p.read_bytes())
        if data and self.rng.random() < 0.5:
            data[self.rng.randrange(len(data))] ^= 1  # same size: the hash must tell
        else:
            data += b"# edited\n"
        p.write_bytes(bytes(data))
        self.user[rel] = bytes(data)
        self.log.append(f"{i}: user edits {rel}")

    def step_delete(self, i):
        if not self.user:
            return self.step_add(i)
        listed = (read_manifest(self.out) or (None, {}, set()))[1]
        edited = sorted(rel for rel in self.user if rel in listed)
        rel = self.rng.choice(edited if edited and self.rng.random() < 0.7 else sorted(self.user))
        (self.out / rel).unlink()
        del self.user[rel]
        parent = (self.out / rel).parent  # a folder the user emptied goes with the file
        while parent != self.out and not any(parent.iterdir()) \
                and parent.relative_to(self.out).as_posix() not in self.user_dirs:
            parent.rmdir()
            parent = parent.parent
        self.log.append(f"{i}: user deletes {rel}")

    def step_clear(self, i):
        """The user deletes the last run's outputs and the manifest (keeping their own files)."""
        manifest = read_manifest(self.out)
        if not manifest:
            return self.step_add(i)
        for rel in [*manifest[1], *manifest[2]]:
            if rel not in self.user:
                (self.out / rel).unlink(missing_ok=True)
        (self.out / ".tokenflow-outputs").unlink()
        for d in sorted((p for p in self.out.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(d.iterdir()) and d.relative_to(self.out).as_posix() not in self.user_dirs:
                d.rmdir()
        self.log.append(f"{i}: user deletes the outputs of `{manifest[0]}`")

    @staticmethod
    def take_kept_results(err, ctx):
        """A run refused at the commit (a name the oracle does not know up front, taken by a file of
        the user's) keeps its results whole in one folder, which its message names: check it, and
        move it away as the user would. Whether the run was such a one."""
        kept = re.search(r"this run's outputs are in (\S+)$", err)
        if kept:
            assert Path(kept.group(1)).is_dir() and "did not write it" in err, ctx
            shutil.rmtree(kept.group(1))
        return bool(kept)

    # ---- two runs at once, and kills -----------------------------------------------------------------
    def step_concurrent(self, i):
        runs = []
        for _ in range(2):
            args, name = self.command()
            if name == "resume":
                args, name = ["simulate", "--set", "init.n=40", "--set", "run.T=0.05"], "simulate"
            p = subprocess.Popen([str(CLI), *map(str, args), "--out", str(self.out)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, env=ENV)
            runs.append((p, name))
        results = [(p.pid, name, p.wait(timeout=120), p.stderr.read()) for p, name in runs]
        self.log.append(f"{i}: at once: " + "; ".join(f"{n} -> {c} {e.strip()[:120]}" for _, n, c, e in results))
        for k, (pid, name, code, err) in enumerate(results):
            assert code in (0, 2), f"seed {SEED}, step {i}: {self.log[-1]}"
            if "in use by another tokenflow process" in err:
                assert f"(pid {results[1 - k][0]})" in err, f"seed {SEED}, step {i}: the holder's pid ({err})"
            if code == 2:
                self.take_kept_results(err.strip(), f"seed {SEED}, step {i}: {self.log[-1]}")
            if code == 0:
                self.debris_ok = False
        self.check(f"step {i}")

    def step_kill(self, i):
        if self.rng.random() < 0.5:
            # A long run, killed while it computes (with checkpoints half of the time).
            args = ["simulate", "--set", "init.n=1500", "--set", "run.T=1000"]
            if self.rng.random() < 0.5:
                args += ["--set", "run.checkpoint_every=3"]
            delay = self.rng.uniform(0.02, 1.0)
        else:
            # A cheap run (about 0.2 s), killed at any moment of it: also while it commits.
            args, name = self.command()
            if name == "resume":
                args = ["reproduce", "sphere", "--quick", "--no-figures"]
            delay = self.rng.uniform(0.0, 0.4)
        sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
        p = subprocess.Popen([str(CLI), *args, "--out", str(self.out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=ENV)
        time.sleep(delay)
        p.send_signal(sig)
        code = p.wait(timeout=60)
        self.outcomes[f"kill -> {code}"] = self.outcomes.get(f"kill -> {code}", 0) + 1
        self.log.append(f"{i}: {' '.join(map(str, args))} killed by {sig.name} after {delay:.2f} s -> {code}")
        assert code in (-signal.SIGKILL, 128 + signal.SIGTERM, -signal.SIGTERM, 0, 2), \
            f"seed {SEED}, step {i}: {self.log[-1]} {p.stderr.read()}"
        self.debris_ok = code != 0  # a run that finished cleaned up after the kill before it
        self.check(f"step {i}")


def test_output_folder_state_machine(tmp_path):
    assert CLI.exists(), f"{CLI} not found: run `make build` first"
    print(f"[ tokenflow ] output-folder states: seed {SEED} (TOKENFLOW_TEST_SEED={SEED} replays it)")
    rng = random.Random(SEED)
    np_rng = np.random.default_rng(SEED)
    np.save(tmp_path / "x.npy", np_rng.normal(size=(30, 2)))
    np.save(tmp_path / "y.npy", np_rng.normal(size=(25, 2)))
    inputs = (tmp_path / "x.npy", tmp_path / "y.npy")
    for s in range(SEQUENCES):
        root = tmp_path / f"sequence-{s}"
        root.mkdir()
        folder = Folder(root, rng, inputs)
        for i in range(STEPS):
            r = rng.random()
            if r < 0.5:
                folder.step_run(i)
            elif r < 0.6:
                folder.step_add(i)
            elif r < 0.66:
                folder.step_edit(i)
            elif r < 0.76:
                folder.step_delete(i)
            elif r < 0.8:
                folder.step_clear(i)
            elif r < 0.9:
                folder.step_concurrent(i)
            else:
                folder.step_kill(i)
            folder.check(f"after step {i}")
        print(f"sequence {s}: " + ", ".join(f"{k}: {v}" for k, v in sorted(folder.outcomes.items())))
