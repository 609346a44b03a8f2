"""Copies of the builds under comparison, made side by side at the start of a run.

A binary's copy age and filesystem move `skillbox extract` by up to 0.6 ms on these machines (a
fresh copy in /tmp against one made half an hour earlier, or against one on tmpfs:
bench-results/throughput.md, "A copy's age and place move the CLI's time"). So the A/B scripts
run copies made together, in one fresh directory on the same filesystem, never the paths given.
"""
import atexit
import os
import shutil
import tempfile

CHILD = "skillbox-child"


def fresh_copies(bins, parent=None):
    """Copy every `skillbox` in `bins`, with the `skillbox-child` beside it when there is one, into
    one new directory under `parent` (the temporary directory by default), one subdirectory per
    build; return the copies' paths in the same order. The directory is removed at exit."""
    root = tempfile.mkdtemp(prefix="skillbox-ab-", dir=parent)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    out = []
    for k, b in enumerate(bins):
        d = os.path.join(root, str(k))
        os.mkdir(d)
        copy = os.path.join(d, os.path.basename(b))
        shutil.copy2(b, copy)
        child = os.path.join(os.path.dirname(os.path.abspath(b)), CHILD)
        if os.path.basename(b) != CHILD and os.path.exists(child):
            shutil.copy2(child, os.path.join(d, CHILD))
        out.append(copy)
    return out
