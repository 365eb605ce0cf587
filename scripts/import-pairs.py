#!/usr/bin/env python3
"""Fails when two source files of a crate import each other.

A file imports another when it names it through `crate::PATH` or
`super::NAME` outside comments; a module and its own submodules may refer
to each other (that is how a file is split along its seams). Tests are
left out. Exits 1 listing each pair.
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = [
    "executor-core", "executor-container", "executor-docker", "executor-k8s",
    "executor-shell", "runner-cli", "tests/kube-testcluster", "tests/conformance",
    "tests/link",
]


def module_path(src, path):
    parts = os.path.relpath(path, src)[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts)


def imports(modules, module, path):
    text = "\n".join(
        line for line in open(path, encoding="utf-8").read().split("\n")
        if not line.strip().startswith("//")
    )
    found = set()
    for ref in re.findall(r"crate::([a-z_0-9]+(?:::[a-z_0-9]+)*)", text):
        parts = ref.split("::")
        for i in range(len(parts), 0, -1):
            candidate = "::".join(parts[:i])
            if candidate in modules:
                found.add(candidate)
                break
    parent = module.rsplit("::", 1)[0] if "::" in module else ""
    for name in re.findall(r"super::([a-z_0-9]+)", text):
        candidate = f"{parent}::{name}" if parent else name
        if candidate in modules:
            found.add(candidate)
    found.discard(module)
    return found


def main():
    pairs = []
    for crate in CRATES:
        src = os.path.join(ROOT, crate, "src")
        files = [
            f for f in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True)
            if not f.endswith("tests.rs") and "/tests/" not in f
        ]
        modules = {module_path(src, f): f for f in files}
        deps = {m: imports(modules, m, f) for m, f in modules.items()}
        for a, targets in deps.items():
            for b in targets:
                related = b.startswith(a + "::") or a.startswith(b + "::")
                if a < b and a in deps.get(b, ()) and not related:
                    pairs.append(f"{crate}: {a} <-> {b}")
    if pairs:
        print("files that import each other:\n  " + "\n  ".join(pairs))
        sys.exit(1)
    print("no two files of a crate import each other")


main()
