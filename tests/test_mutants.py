"""scripts/mutants.py stays applicable: every deliberate breakage still matches the code.

Running the mutants takes minutes (``python scripts/mutants.py``); this only checks the list.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_mutants():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutant_snippet_occurs_exactly_once_and_the_mutant_compiles():
    """A mutant whose file no longer compiles would be 'killed' by a SyntaxError, not by a test."""
    mutants = load_mutants()
    for m in mutants.MUTANTS:
        text = (ROOT / m.path).read_text()
        found = len(mutants.locate(text, m.old))
        assert found == 1, f"{m.name}: snippet found {found} times in {m.path}"
        mutated = mutants.mutate(text, m.old, m.new)
        assert mutated != text
        compile(mutated, m.path, "exec")


def test_snippets_are_anchored_by_text_not_by_indentation():
    """Code moved into a helper one level deeper still matches, and the replacement follows it."""
    mutants = load_mutants()
    before = "def f(x):\n    if x:\n        y = 1\n        return y\n    return 0\n"
    moved = "class A:\n    def g(self, x):\n        if x:\n            y = 1\n            return y\n        return 0\n"
    old, new = "        y = 1\n        return y\n", "        return 2\n"
    assert [len(mutants.locate(t, old)) for t in (before, moved)] == [1, 1]
    assert mutants.mutate(moved, old, new) == "class A:\n    def g(self, x):\n        if x:\n            return 2\n        return 0\n"
    compile(mutants.mutate(moved, old, new), "moved", "exec")
    inline_old = "y = 1\n        return y"  # starts mid-line: its second line sets the depth
    assert mutants.mutate(moved, inline_old, "y = 3\n        return -y") == moved.replace(
        "y = 1\n            return y", "y = 3\n            return -y")
    assert len(mutants.locate(before, "        y = 2\n")) == 0


def test_every_kind_has_mutants_and_existing_test_files():
    mutants = load_mutants()
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
    per_kind = Counter(m.kind for m in mutants.MUTANTS)
    assert sorted(per_kind) == sorted(mutants.FAMILY) == list(range(1, 22)) and min(per_kind.values()) >= 3
    for files in mutants.FAMILY.values():
        assert all((ROOT / f).is_file() for f in files)
