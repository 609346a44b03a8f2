#!/usr/bin/env python3
"""The library's module graph, and any cycle in it.

Each top-level module of src/ (a file `src/x.rs` or a directory `src/x/`) is a node; an edge
x -> y is any `crate::y` path in x's files (a `use`, a qualified call or a doc link: a doc link
to a module above is a dependency of the text on it, and is counted). The binary side
(src/main.rs, src/cli/) and src/lib.rs sit above everything and are left out.

Usage: scripts/modgraph.py [--dot]    prints the graph (or Graphviz with --dot) and every
cycle; exit status 1 when there is a cycle, 0 when there is none.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
SKIP = {"main", "lib", "cli"}


def strip_comments(text):
    # Line comments other than doc comments carry no dependency.
    return "\n".join(l for l in text.splitlines() if not re.match(r"\s*//(?![/!])", l))


def graph():
    deps = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
            top = rel.split(os.sep)[0].removesuffix(".rs")
            if top in SKIP:
                continue
            text = strip_comments(open(os.path.join(dirpath, f), encoding="utf-8").read())
            found = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                found.update(re.findall(r"(?:^|[\s,{])([a-z_][a-z0-9_]*)", group))
            deps.setdefault(top, set()).update(d for d in found if d != top)
    return deps


def cycles(deps):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in deps:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def main():
    deps = graph()
    if "--dot" in sys.argv[1:]:
        print("digraph skillbox {")
        for m in sorted(deps):
            for d in sorted(deps[m]):
                print(f'  "{m}" -> "{d}";')
        print("}")
    else:
        for m in sorted(deps):
            print(f"{m} -> {', '.join(sorted(deps[m])) or '(nothing)'}")
    found = cycles(deps)
    for c in found:
        print(f"cycle: {' <-> '.join(c)}", file=sys.stderr)
    if not found:
        print("no cycle", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
