"""Conformance: the peers' own test suites run against our packages through import aliases.

Takes an upstream checkout of tensordict or TorchRL (a work tree, or a git directory whose ``HEAD``
is exported), copies the chosen test files into a scratch folder (never into this repository), and
runs each file twice with pytest in the same environment: once against the real library
(``real``), once with ``shim/`` first on ``PYTHONPATH`` so that ``import tensordict`` /
``import torchrl`` resolve to our packages (``ours``, see ``shim/_conformance_alias.py``). Writes
``benchmarks/results/conformance_<suite>.json`` and ``.md``: per file and per test class, the
tests each side passes, ours against the real library's pass count, and what stands in the way
(ours' failures of tests the real library passes, grouped by their error, the upstream names
that are missing under our imports, and the tests of upstream-private internals).

    hatch run bench:conformance tensordict --upstream PATH [--files test/tensordict/test_generic.py ...]
    hatch run bench:conformance torchrl --upstream PATH

``--libs ours`` or ``--libs real`` runs one side only (the other side's last counts are kept when
the output file has them); ``--timeout`` bounds each file's run (a file that overruns is counted
as far as it got).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
SHIM = HERE / "shim"

SUITES = {
    "tensordict": [
        "test/tensordict/test_generic.py",
        "test/tensordict/test_methods.py",
        "test/tensordict/test_lazy.py",
        "test/tensordict/test_nontensor.py",
        "test/tensordict/test_misc.py",
        "test/tensordict/test_errors.py",
        "test/tensordict/test_nameddims.py",
        "test/nn/test_nn.py",
        "test/nn/test_functorch.py",
        "test/tensorclass/test_tensorclass.py",
        "test/memmap/test_memmap.py",
        "test/compile/test_compile.py",
    ],
    "torchrl": [
        "test/test_specs.py",
        "test/rb/test_composable.py",
        "test/rb/test_rb_core.py",
        "test/rb/test_samplers.py",
        "test/rb/test_storages.py",
        "test/rb/test_writers.py",
        "test/rb/test_prioritized.py",
        "test/rb/test_rb_transforms.py",
        "test/transforms/test_action_transforms.py",
        "test/envs/test_env_base.py",
        "test/envs/test_step_mdp.py",
        "test/envs/test_parallel.py",
        "test/test_collectors.py",
        "test/objectives/test_dqn.py",
        "test/objectives/test_ppo.py",
        "test/objectives/test_sac.py",
        "test/objectives/test_values.py",
    ],
}
# upstream helper packages loaded from their source under the aliases: name -> how to find them
HELPERS = {"torchrl": ["torchrl.testing", "torchrl._utils"]}
# the upstream files every run needs next to the tests (helpers, conftest)
SUPPORT = {
    "tensordict": ["test/_utils_internal.py", "test/conftest.py", "test/artifacts"],
    "torchrl": [
        "test/conftest.py",
        "test/rb/_rb_common.py",
        "test/rb/conftest.py",
        "test/transforms/_transforms_common.py",
        "test/transforms/conftest.py",
        "test/envs/_envs_common.py",
        "test/envs/conftest.py",
        "test/objectives/_objectives_common.py",
        "test/objectives/conftest.py",
        "test/assets",
    ],
}

# a test that reaches a private upstream name: missing under our imports, or a private attribute (an
# instance ``__dict__`` too: whether attributes live in slots is the implementation's business)
_PRIVATE = re.compile(r"conformance: our packages have no [\w.]*\._\w+|has no attribute '(_[A-Za-z]\w*|__dict__)'")
# a test that reaches a public upstream name we do not provide (a class or function not built here)
_NOT_BUILT = re.compile(r"conformance: our packages have no [\w.]+")
# failures that are our documented, deliberate differences (README, "Migrating"): message -> reason
DELIBERATE = [
    (
        re.compile(r"isinstance\(ParallelEnv\(num_workers=1, .*\), SerialEnv\)"),
        "calling a class returns an instance of that class: ParallelEnv(serial_for_single=True) with one "
        "worker runs in-process and stays a ParallelEnv",
    ),
    (
        re.compile(r"\+ \S*\.[0-9a-f]{16}\.memmap"),
        "the on-disk layout is our own (file names carry a hash of the key)",
    ),
    (
        re.compile(r"cannot store a [\w.]+ as JSON"),
        "saving never unpickles: non-tensor payloads must be JSON-able",
    ),
    (
        re.compile(r"KeyError: .*not found in \w+ with keys"),
        "td.get(missing) raises KeyError instead of returning None",
    ),
    (
        re.compile(r"KeyError: .*(is missing|missing in-key|none of the keys)"),
        "modules never feed None for a missing in-key",
    ),
    (
        re.compile(r"action '.*': expected shape (\[[^\]]*\]) and dtype \S+ \(from the spec\), got shape \1 and dtype"),
        "actions are checked against the action spec's dtype on every step",
    ),
    (
        re.compile(r"MultiAction: pass num_actions=K|dynamic_shape=True is not supported"),
        "specs have static shapes",
    ),
    (
        # a shape of () compared with TorchRL's (1,): a spec built without a shape, or a per-step scalar
        re.compile(r"assert torch\.Size\(\[\]\) == torch\.Size\(\[1\]\)"),
        "Unbounded() and NonTensor() default to shape () (TorchRL: (1,)); per-step scalars have no trailing dim",
    ),
    (
        # an env writing a done flag or reward with TorchRL's trailing singleton ([*B, 1]) where our spec has [*B]
        re.compile(
            r"'(?:done|terminated|truncated|reward)': expected shape \[\] and dtype \S+ \(from the specs?\), "
            r"got shape \[1\]"
            r"|'(?:done|terminated|truncated|reward)': expected shape \[([^\]]+)\] and dtype \S+ \(from the specs?\), "
            r"got shape \[\1, 1\]"
        ),
        "an env's done flags and reward are per-step scalars: no trailing singleton dim",
    ),
    (
        # one per-step entry shaped [*B, 1] next to one shaped [*B] (the same dims), either order
        re.compile(
            r"shape \((\d+(?:, \d+)*), 1\)(?:[^;]* has shape|, expected| must have the values' shape) \(\1,?\)"
            r"|shape \((\d+(?:, \d+)*),?\)[^;]* has shape \(\2, 1\)"
            r"|shape \(1,\)(?:[^;]* has shape|, expected| must have the values' shape) \(\)|shape \(\)[^;]* has shape \(1,\)"
        ),
        "per-step scalars (reward, done, value, advantage, log-prob) have no trailing singleton dim",
    ),
    (
        # a test that sets one of the peers' switches and reads it back gets the stub's fixed answer
        re.compile(
            r"where (?:True|False|None) = (?:get_defaults_to_none|capture_non_tensor_stack|list_to_stack"
            r"|lazy_legacy|composite_lp_aggregate)\("
        ),
        "no process-global behaviour switches (the runner's stubs report our one behaviour)",
    ),
    (
        re.compile(r"MacroPrimitiveTransform\.__init__\(\) got an unexpected keyword argument 'action_dim'"),
        "MacroPrimitiveTransform runs a macro in closed loop inside the env step (TorchRL's: an open-loop "
        "expansion of the action into a fixed-length sequence)",
    ),
    (
        # ours: None for the dims an nd index tensor makes; tensordict: the indexed dim's name, repeated
        re.compile(r"assert \[[^\]]*None, None[^\]]*\] == \[[^\]]*'(\w+)', '\1'"),
        "dims made by an index tensor are unnamed (tensordict repeats a name)",
    ),
]


def export_tests(upstream: Path, suite: str, files: list[str], dest: Path) -> str:
    """Copies ``files`` and the suite's support files from ``upstream`` into ``dest``; returns the
    upstream commit (``git rev-parse HEAD``) when there is one."""
    paths = sorted(set(files) | set(SUPPORT[suite]))
    if (upstream / "test").is_dir():  # a work tree
        for rel in paths:
            src, dst = upstream / rel, dest / rel
            if not src.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        git = ["git", "-C", str(upstream)]
    else:  # a git directory without a work tree
        git = ["git", f"--git-dir={upstream}"]
        listed = subprocess.run(
            [*git, "ls-tree", "-r", "--name-only", "HEAD"], check=True, capture_output=True, text=True
        )
        tracked = listed.stdout.splitlines()
        paths = [p for p in paths if any(t == p or t.startswith(p + "/") for t in tracked)]
        archive = subprocess.run([*git, "archive", "HEAD", *paths], check=True, capture_output=True).stdout
        with tempfile.TemporaryFile() as f:
            f.write(archive)
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                tar.extractall(dest, filter="data")
    rev = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    return rev.stdout.strip() if rev.returncode == 0 else "unknown"


TEST_TIMEOUT = 300
MEMORY_LIMIT = 12 << 30  # bytes of address space per pytest run: a runaway test fails, the machine lives


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _has_pytest_timeout() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytest_timeout") is not None


def helper_sources(suite: str) -> str:
    """``name=folder`` pairs for ``CONFORMANCE_SOURCE_DIRS``: the helper packages of the installed
    real library (its release's test helpers, matching the tests' expectations of it)."""
    pairs = []
    for name in HELPERS.get(suite, []):
        code = (
            f"import importlib.util as u; s = u.find_spec({name!r}); "
            "print(s.submodule_search_locations[0] if s.submodule_search_locations else s.origin)"
        )
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if found.returncode == 0:
            pairs.append(f"{name}={found.stdout.strip()}")
    return os.pathsep.join(pairs)


def run_file(scratch: Path, rel: str, lib: str, timeout: float, helpers: str = "") -> dict:
    """One pytest run of one file against ``lib``; its per-test outcomes from the JUnit report."""
    report = scratch / f"junit-{lib}-{rel.replace('/', '_')}.xml"
    missing_out = scratch / f"missing-{lib}-{rel.replace('/', '_')}"
    paths = [str(scratch / "test"), *([str(SHIM)] if lib == "ours" else [])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*paths[::-1], os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "CONFORMANCE_MISSING_OUT": str(missing_out),
        "CONFORMANCE_SOURCE_DIRS": helpers,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    # one test that hangs (a spawned child waiting forever) must not stall the file: pytest-timeout
    # (installed in the bench environment) fails it after TEST_TIMEOUT seconds
    per_test = [f"--timeout={TEST_TIMEOUT}"] if _has_pytest_timeout() else []
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        rel,
        "-q",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "--tb=no",  # the report keeps each failure's message; formatting thousands of tracebacks is slow
        f"--junitxml={report}",
        *per_test,
        "-o",
        "junit_family=xunit1",
    ]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory
        )
        tail, status = proc.stdout[-2000:], proc.returncode
    except subprocess.TimeoutExpired as err:
        tail, status = (err.stdout or b"")[-2000:].decode(errors="replace") if err.stdout else "", "timeout"
    tests = _parse_junit(report) if report.is_file() else {}
    missing: Counter = Counter()
    for part in scratch.glob(missing_out.name + ".*.json"):
        missing.update(json.loads(part.read_text()))
    return {
        "tests": tests,
        "status": status,
        "seconds": round(time.monotonic() - start, 1),
        "tail": tail,
        "missing": dict(missing),
    }


def _parse_junit(path: Path) -> dict:
    """``{test id: [outcome, message]}``, outcome one of passed, failed, error, skipped."""
    tests = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed" if tag == "failure" else tag
                message = (node.get("message") or node.text or "").strip()
                break
        tests[test_id] = [outcome, message[:500]]
    return tests


def _class_of(test_id: str) -> str:
    classname = test_id.split("::", 1)[0]
    last = classname.rsplit(".", 1)[-1]
    return last if last[:1].isupper() else "(module level)"


def _cause(message: str) -> str:
    """A failure message reduced to its kind: its first line, numbers and printed tensors blanked."""
    first = message.splitlines()[0] if message else "(no message)"
    first = re.sub(r"\btensor\(.*", "tensor(…)", first)
    first = re.sub(r"(?:/[\w.+\-]+){2,}/?", "<path>", first)  # no machine's paths in the report
    first = re.sub(r"\d+", "N", first)
    return first[:140]


def summarise(by_lib: dict) -> dict:
    """Per file and per class: tests, passes of each side, ours' passes among the real library's
    passes (private-internal failures set apart), and the causes of ours' failures."""
    files: dict = {}
    causes: Counter = Counter()
    missing: Counter = Counter()
    for rel in sorted(set(by_lib.get("ours", {})) | set(by_lib.get("real", {}))):
        ours = by_lib.get("ours", {}).get(rel, {"tests": {}})
        real = by_lib.get("real", {}).get(rel, {"tests": {}})
        missing.update(ours.get("missing", {}))
        classes: dict = defaultdict(lambda: Counter())
        for test_id in set(ours["tests"]) | set(real["tests"]):
            o = ours["tests"].get(test_id, ["absent", ""])
            r = real["tests"].get(test_id, ["absent", ""])
            c = classes[_class_of(test_id)]
            c["tests"] += 1
            c["ours_passed"] += o[0] == "passed"
            c["real_passed"] += r[0] == "passed"
            if r[0] == "passed":
                if o[0] == "passed":
                    c["both_passed"] += 1
                elif _PRIVATE.search(o[1]):
                    c["private"] += 1
                elif any(pattern.search(o[1]) for pattern, _ in DELIBERATE):
                    c["deliberate"] += 1
                else:
                    c["not_built"] += bool(_NOT_BUILT.search(o[1]))
                    causes[
                        _cause(o[1])
                        if o[0] != "absent"
                        else "(not collected: the file failed to import or ran out of time)"
                    ] += 1
        total = Counter()
        for c in classes.values():
            total.update(c)
        files[rel] = {
            "total": dict(total),
            "classes": {k: dict(v) for k, v in sorted(classes.items())},
            "status": {lib: by_lib.get(lib, {}).get(rel, {}).get("status") for lib in ("ours", "real")},
            "seconds": {lib: by_lib.get(lib, {}).get(rel, {}).get("seconds") for lib in ("ours", "real")},
        }
    return {"files": files, "causes": causes.most_common(80), "missing_names": missing.most_common(80)}


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def table(summary: dict, meta: dict) -> str:
    lines = [
        f"# Conformance: {meta['suite']} upstream suite against our packages",
        "",
        f"Upstream commit {meta['commit']}; command `{meta['command']}`; {meta['date']}.",
        "",
        "`real passed`: tests the real library passes here. `ours / real`: of those, the share ours passes;",
        "`(neither)` leaves out the tests that fail on an upstream-private name missing under our imports",
        "(`private`) and those that fail on one of our documented, deliberate differences (`deliberate`).",
        "`(built)` also leaves out the tests that reach a public upstream name we do not provide (`not built`):",
        'the measure for targets stated over the features we have ("the transforms we have").',
        "",
        "| file / class | tests | real passed | ours passed | ours / real | private | deliberate | ours / real (neither) "
        "| not built | ours / real (built) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    grand = Counter()
    for rel, f in summary["files"].items():
        t = Counter(f["total"])
        grand.update(t)
        lines.append(_row(f"**{rel}**", t))
        for name, c in f["classes"].items():
            if len(f["classes"]) > 1:
                lines.append(_row(f"&nbsp;&nbsp;{name}", Counter(c)))
    lines.append(_row("**all files**", grand))
    lines += ["", "## Ours' failures of tests the real library passes, by cause (top 40)", ""]
    lines += [f"- {n} × `{cause}`" for cause, n in summary["causes"][:40]]
    lines += ["", "## Upstream names missing under our imports (times touched, top 40)", ""]
    lines += [f"- `{name}`: {n}" for name, n in summary["missing_names"][:40]]
    return "\n".join(lines) + "\n"


def _row(label: str, c: Counter) -> str:
    real, both, private, deliberate = c["real_passed"], c["both_passed"], c["private"], c["deliberate"]
    not_built = c["not_built"]
    return (
        f"| {label} | {c['tests']} | {real} | {c['ours_passed']} | {_pct(both, real)} | {private} | {deliberate} | "
        f"{_pct(both, real - private - deliberate)} | {not_built} | {_pct(both, real - private - deliberate - not_built)} |"
    )


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument(
        "--upstream", required=True, type=Path, help="checkout (or git directory) of the upstream repository"
    )
    parser.add_argument("--files", nargs="*", default=None, help="test files, relative to the upstream root")
    parser.add_argument("--libs", default="ours,real")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per file and library")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true", help="rewrite the tables from the cached outcomes")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rl-conformance",
        help="where every test's outcome is kept between runs (one side can be rerun alone)",
    )
    args = parser.parse_args()
    files = args.files or SUITES[args.suite]
    libs = [lib for lib in args.libs.split(",") if lib]
    out = args.out or RESULTS / f"conformance_{args.suite}.json"
    cache = args.cache / f"{args.suite}.json"  # every test's outcome, kept out of the repository
    previous = json.loads(cache.read_text()) if cache.is_file() else {}
    if args.report_only:
        if not previous:
            parser.error(f"--report-only: no cached outcomes at {cache}")
        summary = summarise(previous["runs"])
        _write_atomic(out, json.dumps({"meta": previous["meta"], "summary": summary}, indent=1) + "\n")
        _write_atomic(out.with_suffix(".md"), table(summary, previous["meta"]))
        return
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        scratch = Path(tmp)
        commit = export_tests(args.upstream.resolve(), args.suite, files, scratch)
        helpers = helper_sources(args.suite)
        by_lib: dict = {lib: dict(previous.get("runs", {}).get(lib, {})) for lib in ("ours", "real")}
        for rel in files:
            for lib in libs:
                result = run_file(scratch, rel, lib, args.timeout, helpers)
                by_lib[lib][rel] = result
                _write_atomic(cache, json.dumps({"runs": by_lib}))  # a killed run keeps the files done
                passed = sum(o == "passed" for o, _ in result["tests"].values())
                print(
                    f"{rel} [{lib}]: {passed}/{len(result['tests'])} passed in {result['seconds']} s (exit {result['status']})",
                    flush=True,
                )
                if len(result["tests"]) <= 1:
                    print(result["tail"][-1500:], flush=True)
    by_lib = {lib: runs for lib, runs in by_lib.items() if runs}
    meta = {
        "suite": args.suite,
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "python": sys.version.split()[0],
        "command": " ".join(
            ["python", str(Path(__file__).resolve().relative_to(HERE.parents[1])), *sys.argv[1:]]
        ).replace(str(args.upstream), "UPSTREAM"),
    }
    summary = summarise(by_lib)
    _write_atomic(cache, json.dumps({"meta": meta, "runs": by_lib}))
    _write_atomic(out, json.dumps({"meta": meta, "summary": summary}, indent=1) + "\n")
    _write_atomic(out.with_suffix(".md"), table(summary, meta))
    print(table(summary, meta))


if __name__ == "__main__":
    main()
