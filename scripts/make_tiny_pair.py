"""Write a tiny target and a tiny drafter model that never pays, as Hugging Face-format folders
(for ``specchat bench --target DIR/target --drafter-model DIR/drafter --drafters sibling``).

Both are 2-layer Qwen2 models with random weights (the drafter from another seed: it agrees with
the target about as often as chance, α ≈ 0.1) and the same byte-level tokenizer with a plain chat
template. The drafter is as large as the target, so a drafted token costs about a target step:
drafting can never pay, and with the CLI's defaults (adaptive γ) the controller has to pause it.

usage: python scripts/make_tiny_pair.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_models import byte_tokenizer, tiny_model  # noqa: E402

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def write_pair(out: Path) -> tuple[Path, Path]:
    """The two folders ``out/target`` and ``out/drafter``."""
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    folders = []
    for name, seed in (("target", 0), ("drafter", 1)):
        model = tiny_model(vocab_size=len(tokenizer), family="qwen2", seed=seed, hidden_size=64, max_positions=2048)
        model.config.eos_token_id = tokenizer.eos_token_id
        folder = out / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(folder)
    return folders[0], folders[1]


if __name__ == "__main__":
    print(*write_pair(Path(sys.argv[1])), sep="\n")
