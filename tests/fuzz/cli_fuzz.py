#!/usr/bin/env python3
"""Command-line fuzzer of `tokenflow`: random argv built from each command's own description.

The commands, their flags and their config keys are read from the CLI itself (`tokenflow --help`,
`tokenflow COMMAND --help`, `tokenflow config COMMAND`), never from a copied list. Each case is one
command with small sizes (so that it answers in well under the time limit) and a few hostile
ingredients: valid keys with hostile values (NaN, inf, 1e999, -0, huge integers, empty, 60 KB
and 10 MB strings, unicode, wrong types), unknown keys, repeated flags, paths to hostile files
(truncated or corrupt .npy, directories, fifos, /dev/zero, symlinks, non-UTF-8 names, hostile TOML).

What every case must satisfy (a failure prints the seed, the case number and the argv to replay):
- the exit code is 0, 1 or 2 (never a signal: a crash; 130/143 only come from signals, which the
  fuzzer does not send);
- stderr stays under 4 KiB, and a refusal (exit 2) is one line;
- nothing outside --out changes (the sandbox's listing, sizes and contents are compared), and a
  run leaves no file in TMPDIR;
- a user's file already in --out is still there, unchanged;
- exit 0 leaves summary.json in --out and no .npy with a non-finite value.
A case that runs past its time limit is reported, not failed, unless every size it was given was
small (then the command ignored them: a failure).

Usage: cli_fuzz.py [--cli build/tokenflow] [--seconds N] [--seed S] [--replay K]
The budget defaults to $CLI_FUZZ_SECONDS or 180 s; the seed is fresh each run and printed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

STDERR_LIMIT = 4096
# Ingredients of a case (besides the small baseline) that may legitimately make it slow.
SIZE_UNITS = {"tokens", "steps", "pairs", "iterations", "frames", "time"}
SIZE_NAMES = {"n", "m", "d", "ns", "width", "layers", "heads", "k", "seeds", "samples", "steps", "batch",
              "test_pairs", "T", "dt", "tol", "max_iter", "sinkhorn_max_iter", "sinkhorn_tol", "converge_tol",
              "checkpoint_every", "save_every", "min_m", "exact_max_n", "grid_frames", "sinkhorn_iters",
              "summation_tol"}
# Flags that ask for large sizes or long runs.
SIZE_FLAGS = {"--large", "--tour", "--max-iter", "--top"}
# Small sizes for every command (keys that a command does not have are left out).
SMALL = {"init.n": "8", "init.d": "2", "run.T": "0.05", "run.dt": "0.01", "meanfield.ns": "[8, 16]",
         "meanfield.seeds": "1", "stability.frames": "2", "task.n": "4", "task.m": "4", "task.d": "2",
         "model.width": "8", "model.layers": "1", "model.heads": "1", "model.k": "4", "model.sinkhorn_iters": "3",
         "train.steps": "2", "train.batch": "2", "train.test_pairs": "2"}
# Commands that would run far past a case's time (every reproduction) or need a terminal.
SKIPPED = {"demo"}

HOSTILE_NUMBERS = ["nan", "-nan", "inf", "-inf", "1e999", "-1e999", "1e-999", "-0", "-0.0", "0", "-1",
                   "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
                   "99999999999999999999999999", "1e308", "-1e308", "5e-324", "0x7fffffff", "1_000", "+1"]
HOSTILE_TYPES = ['""', "''", "", '"text"', "[1, 2]", "[[1, 2], [3]]", "[]", "{a = 1}", "true", "1979-05-27",
                 "[nan]", '"\\u0000"', "[1, \"a\"]", "{}"]
# Linux refuses one argument over 128 KiB (MAX_ARG_STRLEN) with E2BIG before the CLI starts; a long
# key and a long value meet in one "--set key=value", so each long string is under half of that.
LONG = 60_000
MAX_ARGUMENT_BYTES = 128 * 1024 - 1  # the terminating NUL counts
UNICODE = ['"h\u00e9llo"', '"\u2211\u222b"', '"\U0001f642"', '"\u202eevil"', "\u00e9", '"a\\nb"', "\x01x"]


def run_text(argv, timeout=60):
    p = subprocess.run(argv, capture_output=True, timeout=timeout, env=dict(os.environ, CI="1"))
    return p.stdout.decode("utf-8", "replace")


def discover(cli):
    """{command: {"flags": {flag: kind}, "required": [...], "keys": {key: (default, values, size)}}}."""
    top = run_text([cli, "--help"])
    commands = re.findall(r"^  ([a-z][a-z-]*)\s{2,}", top.split("Subcommands:")[1], re.M)
    with_keys = set(re.findall(r"[a-z]+", run_text([cli, "config", "--help"]).split("command TEXT")[1].split("(default")[0]))
    spec = {}
    for command in commands:
        if command in SKIPPED:
            continue
        text = run_text([cli, command, "--help"])
        flags, required, positionals = {}, [], []
        options = text.split("Options:")[1] if "Options:" in text else ""
        for m in re.finditer(r"^  (?:-\w,)?(--[a-z][a-z0-9-]*)(?: ([A-Z]+)(?::[A-Z]+)?)?(?: \.\.\.)?( REQUIRED)?", options, re.M):
            flag, kind, req = m.group(1), m.group(2) or "FLAG", m.group(3)
            if flag in ("--help", "--help-all"):
                continue
            flags[flag] = kind
            if req:
                required.append(flag)
        if "Positionals:" in text:
            positionals = re.findall(r"^  ([a-z]+) TEXT", text.split("Positionals:")[1].split("Options:")[0], re.M)
        keys = {}
        if command in with_keys:
            table = ""
            for line in run_text([cli, "config", command]).splitlines():
                header = re.match(r"^  \[\[?([a-z_.]+)\]\]?\s*$", line)
                if header:
                    table = header.group(1)
                    continue
                m = re.match(r"^    ([A-Za-z_]+) = (\[[^\]]*\]|.*?)\s+(\S.*)$", line)
                if not m:
                    continue
                name, default, meaning = m.groups()
                key = f"{table}.{name}" if table else name
                last = meaning.rsplit(";", 1)[-1].strip()
                values = [v.strip() for v in last.split("|")] if "|" in last else []
                unit = re.sub(r"^[\[(][^\])]*[\])]\s*", "", last) if last[:1] in "[(" else ""
                keys[key] = (default, values, unit in SIZE_UNITS or name in SIZE_NAMES)
        spec[command] = {"flags": flags, "required": required, "keys": keys, "positionals": positionals}
    return spec


# ---- the sandbox: hostile files -----------------------------------------------------------------
def npy_bytes(shape, values=None, descr="<f8", header_extra=""):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), %s}" % (
        descr, "".join(f"{s}, " for s in shape) if len(shape) == 1 else ", ".join(map(str, shape)), header_extra)
    header += " " * ((64 - (len(header) + 11) % 64) % 64) + "\n"
    count = 1
    for s in shape:
        count *= s
    values = values if values is not None else [float(i % 7) - 3.0 for i in range(count)]
    fmt = "<%dd" % count if descr == "<f8" else "<%df" % count
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(fmt, *values)


def make_sandbox(root, rng):
    """Hostile input files under root/files; returns {label: path} (paths as str or bytes)."""
    files = os.path.join(root, "files")
    os.makedirs(files)
    p = lambda name: os.path.join(files, name)  # noqa: E731
    out = {}

    def write(name, data):
        with open(p(name), "wb") as f:
            f.write(data)
        out[name] = p(name)

    write("good_8x2.npy", npy_bytes((8, 2)))
    write("good_8.npy", npy_bytes((8,), [0.125] * 8))
    write("good_8x8.npy", npy_bytes((8, 8)))
    write("good_3d.npy", npy_bytes((2, 2, 2)))
    write("f32_8x2.npy", npy_bytes((8, 2), descr="<f4"))
    write("nan_8x2.npy", npy_bytes((8, 2), [float("nan")] * 16))
    write("inf_8.npy", npy_bytes((8,), [float("inf")] * 8))
    write("huge_8x2.npy", npy_bytes((8, 2), [1e308] * 16))
    write("truncated.npy", npy_bytes((8, 2))[:-13])
    write("header_only.npy", npy_bytes((1000000, 2))[:128])
    write("corrupt.npy", bytes(rng.getrandbits(8) for _ in range(300)))
    write("dup_descr.npy", npy_bytes((8, 2), header_extra="'descr': '<f4', "))
    write("extra_key.npy", npy_bytes((8, 2), header_extra="'extra': 1, "))
    write("big_shape.npy", npy_bytes((1,)).replace(b"(1, )", b"(9999999999999999999, 9999999999)", 1))
    write("empty.npy", b"")
    write("zero_rows.npy", npy_bytes((0, 2)))
    write("vectors.txt", b"the 0.1 0.2\ncat 0.3 0.4\nsat 0.5 0.6\nthe 0.7 0.8\n")
    write("vectors_bad.txt", b"2 2\nthe nan 1\n\xff\xfe 1 2\n")
    write("deep.toml", b"[" + b".".join([b"a"] * 5000) + b"]\nx = 1\n")
    write("big_string.toml", b'[attention]\nkind = "' + b"A" * (10 << 20) + b'"\n')
    write("bad_utf8.toml", b'[init]\nkind = "\xff\xfe"\n')
    write("garbage.toml", bytes(rng.getrandbits(8) for _ in range(500)))
    write("model.bin", b"TFMODEL1" + b"\xff" * 64)
    os.makedirs(p("a_directory.npy"))
    out["a_directory.npy"] = p("a_directory.npy")
    os.mkfifo(p("fifo.npy"))
    out["fifo.npy"] = p("fifo.npy")
    os.symlink("/dev/zero", p("dev_zero_link.npy"))
    out["dev_zero_link.npy"] = p("dev_zero_link.npy")
    os.symlink(p("loop_b.npy"), p("loop_a.npy"))
    os.symlink(p("loop_a.npy"), p("loop_b.npy"))
    out["loop_a.npy"] = p("loop_a.npy")
    os.symlink(p("good_8x2.npy"), p("link_good.npy"))
    out["link_good.npy"] = p("link_good.npy")
    bad_name = os.path.join(os.fsencode(files), b"bad_\xff\xfe.npy")
    with open(bad_name, "wb") as f:
        f.write(npy_bytes((8, 2)))
    out["non_utf8_name"] = bad_name
    out["dev_zero"] = "/dev/zero"
    out["dev_null"] = "/dev/null"
    out["missing"] = p("does_not_exist.npy")
    out["empty_path"] = ""
    return out


# ---- cases -------------------------------------------------------------------------------------
def hostile_value(rng):
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(HOSTILE_NUMBERS)
    if kind < 0.7:
        return rng.choice(HOSTILE_TYPES)
    if kind < 0.85:
        return rng.choice(UNICODE)
    if kind < 0.95:
        return '"' + "B" * rng.choice([100, 5000, LONG]) + '"'
    return "C" * LONG


def make_case(spec, files, root, k, seed):
    """Case k of the run with this seed: (command, argv without the CLI, out dir or None, small)."""
    rng = random.Random(seed * 1000003 + k)
    command = rng.choice(sorted(spec))
    info = spec[command]
    argv = [command]
    small = True  # every size given is small (a timeout is then a failure)
    out = os.path.join(root, "runs", f"out{k}")
    hostile_files = sorted(files)

    def a_path():
        return files[rng.choice(hostile_files)]

    keys = info["keys"]
    if keys:
        sets = {key: value for key, value in SMALL.items() if key in keys}
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            key = rng.choice(sorted(keys))
            default, values, size = keys[key]
            if r < 0.55:
                value = hostile_value(rng)
                small = small and not size
            elif r < 0.7 and values:
                value = '"' + rng.choice(values) + '"'
            elif r < 0.8:
                key = rng.choice(["nosuch.key", key + "x", key.split(".")[0], "init.nosuch", "a." * 40 + "b",
                                  "\u00e9t\u00e9", "K" * LONG, ".", "init..n", "[init]"])
                value = rng.choice(["1", '"x"', "nan"])
            elif r < 0.9 and (key.endswith("path") or key.endswith("weights") or key.endswith("positions")):
                value = '"' + os.fsdecode(a_path()).replace("\\", "\\\\").replace('"', '\\"') + '"'
            else:
                value = sets.get(key, default if re.match(r"^[-\d.e\[\]\"a-z, ]+$", default) else "1")
            sets[key] = value
        for key, value in sets.items():
            argv += ["--set", f"{key}={value}"]
        if rng.random() < 0.1:  # a repeated key: the last one wins, or a refusal
            argv += ["--set", f"{key}={hostile_value(rng)}"]
            small = False
        if "--config" in info["flags"] and rng.random() < 0.15:
            argv += ["--config", a_path() if rng.random() < 0.5 else files[rng.choice(
                ["deep.toml", "big_string.toml", "bad_utf8.toml", "garbage.toml"])]]
    for flag, kind in sorted(info["flags"].items()):
        if flag in ("--out", "--set", "--config"):
            continue
        needed = flag in info["required"]
        if not needed and rng.random() > 0.35:
            continue
        if kind == "FLAG":
            argv.append(flag)
            small = small and flag not in SIZE_FLAGS
        elif kind in ("INT", "FLOAT"):
            r = rng.random()
            value = rng.choice(HOSTILE_NUMBERS) if r < 0.6 else hostile_value(rng) if r < 0.8 else "3"
            if flag in SIZE_FLAGS and value not in ("3",):
                small = False
            argv += [flag, value]
        else:  # TEXT: a path for the file flags, else a word
            if flag in ("--x", "--y", "--a", "--b", "--cost-matrix", "--pos-x", "--pos-y", "--model", "--vectors"):
                good = {"--a": "good_8.npy", "--b": "good_8.npy", "--pos-x": "good_8.npy", "--pos-y": "good_8.npy",
                        "--cost-matrix": "good_8x8.npy", "--vectors": "vectors.txt"}.get(flag, "good_8x2.npy")
                argv += [flag, files[good] if rng.random() < 0.5 else a_path()]
            else:
                argv += [flag, rng.choice(["sinkhorn", "exact", "auto", "dot", "the cat sat", "", "x" * LONG,
                                           "\u00e9", "-1", "nan", "online", "kernel"])]
        if rng.random() < 0.05:  # a repeated flag
            argv += argv[-2:] if kind != "FLAG" else [flag]
    for positional in info["positionals"]:
        argv.append(rng.choice(["simulate", "train", "nosuch", "", "\u00e9" * 50]))
    if "--out" in info["flags"]:
        r = rng.random()
        if r < 0.85:
            argv += ["--out", out]
        elif r < 0.95:
            argv += ["--out", rng.choice([files["good_8x2.npy"], files["a_directory.npy"], files["fifo.npy"],
                                          os.path.join(files["good_8x2.npy"], "sub"), "", "/dev/null"])]
            out = None
        else:
            argv += ["--out", out, "--out", out + "b"]
            small = False
    else:
        out = None
    too_long = [shown(a) for a in argv if len(os.fsencode(a)) > MAX_ARGUMENT_BYTES]
    assert not too_long, f"case {k} of seed {seed} built an argument the kernel refuses: {too_long}"
    return command, argv, out, small


# ---- checks ------------------------------------------------------------------------------------
def listing(root, skip):
    """{relative path: (type, size, sha1 of files up to 1 MiB)} under root, skipping the folders
    `skip` (a list of bytes paths) and what they hold."""
    result = {}
    broot = os.fsencode(root)

    def skipped(path):
        return any(path == s or path.startswith(s + b"/") for s in skip)

    for dirpath, dirnames, filenames in os.walk(broot):
        if skipped(dirpath):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if skipped(full):
                continue
            st = os.lstat(full)
            digest = ""
            if os.path.isfile(full) and not os.path.islink(full) and st.st_size <= (1 << 20):
                with open(full, "rb") as f:
                    digest = hashlib.sha1(f.read()).hexdigest()
            result[os.path.relpath(full, broot)] = (oct(st.st_mode), st.st_size, digest)
    return result


def non_finite_npy(path):
    try:
        import numpy as np
    except ImportError:
        return False
    try:
        a = np.load(path, allow_pickle=False)
    except Exception:
        return True  # exit 0 wrote a file numpy cannot read
    return a.dtype.kind in "fc" and not np.all(np.isfinite(a))


def check_case(cli, root, k, seed, case, limit):
    command, argv, out, small = case
    user_file = None
    if out is not None:
        os.makedirs(out)
        user_file = os.path.join(out, "user-notes.txt")
        with open(user_file, "w") as f:
            f.write(f"notes of case {k}\n")
    tmp = os.path.join(root, "tmp")
    skip = [os.fsencode(out)] if out else []
    # When a mutation replaced --out, the folder the CLI reads (relative to its working folder) is
    # inside --out too: changes there are the run's (the user's file in the case's own --out is
    # what checks that a run keeps files it did not write).
    words = [os.fsencode(w) for w in argv]  # hostile arguments may be bytes
    given_outs = [words[i + 1] for i, word in enumerate(words[:-1]) if word == b"--out"]
    given_outs += [word[len(b"--out="):] for word in words if word.startswith(b"--out=")]
    broot = os.fsencode(root)
    writable = [os.path.relpath(os.path.normpath(os.path.join(broot, b"cwd", o)), broot) for o in given_outs if o]
    before = listing(root, skip)
    started = time.monotonic()
    env = dict(os.environ, CI="1", TMPDIR=tmp, OMP_NUM_THREADS="1")
    try:
        p = subprocess.run([cli] + argv, capture_output=True, timeout=limit, env=env, cwd=os.path.join(root, "cwd"),
                           stdin=subprocess.DEVNULL)
        code, stderr = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        code, stderr = None, e.stderr or b""
    seconds = time.monotonic() - started
    problems = []
    if code is None:
        if small:
            problems.append(f"ran past {limit} s though every size was small")
    elif code not in (0, 1, 2):
        problems.append(f"exit code {code}" + (" (killed by a signal: a crash)" if code < 0 else ""))
    if len(stderr) >= STDERR_LIMIT:
        problems.append(f"stderr has {len(stderr)} bytes (limit {STDERR_LIMIT})")
    lines = stderr.count(b"\n")
    if code == 2 and lines != 1:
        problems.append(f"exit 2 with {lines} lines on stderr (one expected)")
    after = listing(root, skip)
    changed = sorted(set(before) ^ set(after)) + sorted(k2 for k2 in before if k2 in after and before[k2] != after[k2])
    changed = [c for c in changed if not any(c == w or c.startswith(w + b"/") for w in writable)]
    if changed:
        problems.append("changed outside --out: " + ", ".join(os.fsdecode(c) for c in changed[:5]))
    if user_file is not None:
        try:
            with open(user_file) as f:
                if f.read() != f"notes of case {k}\n":
                    problems.append("the user's file in --out was changed")
        except OSError:
            problems.append("the user's file in --out is gone")
    if code == 0 and out is not None and command not in ("config",):
        if not os.path.exists(os.path.join(out, "summary.json")) and command != "reproduce":
            problems.append("exit 0 without summary.json")
        for dirpath, _, names in os.walk(out):
            for name in names:
                if name.endswith(".npy") and non_finite_npy(os.path.join(dirpath, name)):
                    problems.append(f"exit 0 with a non-finite (or unreadable) {name}")
    for name in os.listdir(tmp):  # a run leaves nothing in TMPDIR
        problems.append(f"left {name} in TMPDIR")
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    return code, seconds, problems, stderr


def shown(arg) -> str:
    """An argument as a report shows it: long ones cut (the replay line runs the case exactly)."""
    text = os.fsdecode(arg)
    return text if len(text) <= 120 else f"{text[:60]}...<{len(text)} characters>"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", default="build/tokenflow")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("CLI_FUZZ_SECONDS", "180")))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--replay", type=int, default=None, help="run only case K of --seed")
    parser.add_argument("--case-seconds", type=float, default=20.0, help="time limit of one case")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    cli = os.path.abspath(args.cli)
    print(f"cli_fuzz: seed {seed} (replay a case with --seed {seed} --replay K), budget {args.seconds:g} s", flush=True)
    spec = discover(cli)
    print("cli_fuzz: commands " + ", ".join(f"{c} ({len(s['keys'])} keys, {len(s['flags'])} flags)"
                                            for c, s in sorted(spec.items())), flush=True)
    root = tempfile.mkdtemp(prefix="tokenflow-cli-fuzz-")
    failures = timeouts = cases = 0
    codes = {}
    try:
        for sub in ("runs", "tmp", "cwd"):
            os.makedirs(os.path.join(root, sub))
        files = make_sandbox(root, random.Random(seed))
        deadline = time.monotonic() + args.seconds
        k = args.replay if args.replay is not None else 0
        while True:
            case = make_case(spec, files, root, k, seed)
            code, seconds, problems, stderr = check_case(cli, root, k, seed, case, args.case_seconds)
            cases += 1
            codes[code] = codes.get(code, 0) + 1
            if code is None:
                timeouts += 1
                print(f"cli_fuzz: case {k} timed out after {args.case_seconds:g} s (reported, not failed): "
                      f"{shlex.join(shown(a) for a in case[1])}", flush=True)
            if problems or args.replay is not None:
                failures += bool(problems)
                argv = shlex.join(["tokenflow"] + [shown(a) for a in case[1]])
                print(f"cli_fuzz: case {k}: {'; '.join(problems) or 'ok'} (exit {code}, {seconds:.1f} s)\n"
                      f"  argv: {argv}\n  stderr: {shown(stderr[:2000])!r}\n"
                      f"  replay: {sys.argv[0]} --cli {args.cli} --seed {seed} --replay {k}", flush=True)
            k += 1
            if args.replay is not None or time.monotonic() > deadline:
                break
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"cli_fuzz: {cases} cases, exit codes {dict(sorted(codes.items(), key=str))}, {timeouts} timeouts, "
          f"{failures} failures (seed {seed})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
