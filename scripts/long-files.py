#!/usr/bin/env python3
"""Fails when a Rust source file, tests included, is over 450 lines.

A file past that has seams to split along (issue 39): a test file becomes
a folder whose `main.rs` (or `mod.rs`) holds the shared fixtures and whose
files hold one concern's tests each. Exits 1 listing each file.
"""
import os
import sys

LIMIT = 450
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    long = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in ("target", ".git")]
        for name in files:
            if name.endswith(".rs"):
                path = os.path.join(top, name)
                with open(path, encoding="utf-8") as f:
                    lines = sum(1 for _ in f)
                if lines > LIMIT:
                    long.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    if long:
        print(f"files over {LIMIT} lines:\n  " + "\n  ".join(sorted(long)))
        sys.exit(1)
    print(f"no Rust file is over {LIMIT} lines")


main()
