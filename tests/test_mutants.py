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


def test_every_mutant_snippet_occurs_exactly_once_and_changes_the_code():
    mutants = load_mutants()
    for m in mutants.MUTANTS:
        text = (ROOT / m.path).read_text()
        assert text.count(m.old) == 1, f"{m.name}: snippet found {text.count(m.old)} times in {m.path}"
        assert m.old != m.new


def test_every_kind_has_mutants_and_existing_test_files():
    mutants = load_mutants()
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
    per_kind = Counter(m.kind for m in mutants.MUTANTS)
    assert sorted(per_kind) == list(range(1, 11)) and min(per_kind.values()) >= 3
    for files in mutants.FAMILY.values():
        assert all((ROOT / f).is_file() for f in files)
