"""CLI argument validation: bad values exit non-zero with one line that gives the range."""

import subprocess
import sys

import pytest

from specchat.commands.cli import build_parser


@pytest.mark.parametrize(
    "flag, value, allowed",
    [
        ("--num-speculative-tokens", "0", "1..16"),
        ("--num-speculative-tokens", "99", "1..16"),
        ("--temperature", "-0.1", "0..2.0"),
        ("--top-p", "0", "0 < P <= 1"),
        ("--top-p", "1.5", "0 < P <= 1"),
        ("--top-k", "-1", ">= 0"),
        ("--max-new-tokens", "0", "1..8192"),
        ("--temperature", "abc", "0..2.0"),
        ("--top-p", "nan", "0 < P <= 1"),
    ],
)
def test_out_of_range_values_are_rejected_with_the_range(flag, value, allowed, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["generate", "--prompt", "hi", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert allowed in err and flag in err


def test_unknown_drafter_lists_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "hi", "--drafter", "magic"])
    err = capsys.readouterr().err
    assert "none" in err and "ngram" in err and len(err.strip().splitlines()) == 1


def test_defaults_parse_as_the_app_runs():
    """The CLI's defaults are the app's: the measured drafter pick, adaptive γ up to 12, the chat
    template when the model has one (decided once the tokenizer is loaded: None here)."""
    args = build_parser().parse_args(["generate", "--prompt", "hi"])
    assert args.drafter == "auto" and args.num_speculative_tokens == 12 and not args.fixed_gamma
    assert args.temperature == 0.0 and args.chat is None
    assert build_parser().parse_args(["generate", "--prompt", "hi", "--raw"]).chat is False
    assert build_parser().parse_args(["generate", "--prompt", "hi", "--no-chat"]).chat is False
    assert build_parser().parse_args(["generate", "--prompt", "hi", "--chat"]).chat is True


@pytest.mark.subprocess
def test_module_entry_point_runs_help():
    out = subprocess.run([sys.executable, "-m", "specchat", "generate", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--num-speculative-tokens" in out.stdout


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--target", "no-such-model"], "Known names"),
        (["--target", "smollm2-135m-instruct", "--drafter", "sibling", "--runtime", "transformers"],
         "allowed: auto, none, ngram, int4"),
        # on llama.cpp (when installed; else transformers) the NF4 kinds are not offered
        (["--target", "smollm2-135m-instruct", "--drafter", "sibling"], "allowed: auto, none, ngram"),
    ],
)
@pytest.mark.subprocess
def test_unknown_target_or_unavailable_drafter_exit_2_before_loading(extra, expected):
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "generate", "--prompt", "hi", *extra], capture_output=True, text=True
    )
    assert out.returncode == 2 and expected in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_cli_names_the_same_environment_variables():
    """options.py repeats two names so that --help imports neither pydantic nor torch."""
    from specchat import options
    from specchat.runtimes import loading, registry

    assert options.MODELS_YAML_ENV == registry.MODELS_YAML_ENV and options.ALLOW_DOWNLOAD_ENV == loading.ALLOW_DOWNLOAD_ENV


@pytest.fixture(scope="module")
def no_template_pair(tmp_path_factory):
    """A tiny target and drafter whose tokenizer has no chat template (as a base model's)."""
    from tiny_models import byte_tokenizer, tiny_model

    out = tmp_path_factory.mktemp("no-template")
    tokenizer = byte_tokenizer()
    assert tokenizer.chat_template is None
    for name, seed in (("target", 0), ("drafter", 1)):
        model = tiny_model(vocab_size=len(tokenizer), family="qwen2", seed=seed, hidden_size=64, max_positions=512)
        model.config.eos_token_id = tokenizer.eos_token_id
        model.save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
    return out / "target", out / "drafter"


@pytest.mark.parametrize("command", [
    ["generate", "--prompt", "n m l k", "--max-new-tokens", "6"],  # auto: calibration, then the warm-up
    ["generate", "--prompt", "n m l k", "--max-new-tokens", "6", "--no-chat", "--drafter", "ngram"],
    ["generate", "--prompt", "n m l k", "--max-new-tokens", "6", "--chat", "--drafter", "sibling"],
    ["chat", "--script", "SCRIPT", "--max-new-tokens", "6", "--drafter", "auto"],
    ["calibrate", "--again"],
])
def test_every_command_runs_a_model_without_a_chat_template(command, no_template_pair, tmp_path, monkeypatch, capsys):
    """A model whose tokenizer has no chat template (any base model) works in every command: the
    warm-up, the calibration and the chat send plain text (the commands said "this model's
    tokenizer has no chat template" and stopped), and the runtime line says so."""
    from specchat.commands.cli import main

    target, drafter = no_template_pair
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "script.json"
    script.write_text('["a b c", "a b c d"]')
    argv = [str(script) if a == "SCRIPT" else a for a in command]
    status = main([*argv, "--target", str(target), "--drafter-model", str(drafter), "--dtype", "float32"])
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    assert "no chat template" not in err or "reach it as plain text" in err
    if command[0] == "generate":
        assert "this model has no chat template: messages reach it as plain text" in err


def test_calibrate_all_kinds_times_every_model_drafter_and_prints_what_each_costs(no_template_pair, tmp_path,
                                                                                   monkeypatch, capsys):
    """``calibrate --all-kinds`` times every model drafter the target offers (here on transformers:
    int4, sibling, sibling-int4) and prints each one's c = drafted-token time / target step."""
    from specchat.commands.cli import main

    target, drafter = no_template_pair
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    status = main(["calibrate", "--all-kinds", "--target", str(target), "--drafter-model", str(drafter),
                   "--dtype", "float32"])
    out = capsys.readouterr().out
    assert status == 0
    timed = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and " c=" in line}
    assert timed == {"int4", "sibling", "sibling-int4"}, out


def test_the_terminal_colours_tokens_as_the_pages_legend():
    """``generate`` and ``chat`` colour a token kind as the page's legend does (common.py repeats
    the colours so that the command line does not import the page's renderer)."""
    from specchat.commands.common import TOKEN_STYLES
    from specchat.ui.html.render import KIND_COLORS

    assert set(TOKEN_STYLES) == set(KIND_COLORS)
    for kind in ("accepted", "resampled"):
        assert TOKEN_STYLES[kind] == KIND_COLORS[kind], kind
    # bonus: the page's purple, lighter (the page's read poorly on a black terminal; its contrast
    # there is tests/test_render_ux.py's), the same hue
    import colorsys

    hue = [colorsys.rgb_to_hls(*(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))) for c in
           (TOKEN_STYLES["bonus"], KIND_COLORS["bonus"])]
    assert abs(hue[0][0] - hue[1][0]) < 0.02 and hue[0][1] > hue[1][1]
    assert TOKEN_STYLES["target"] == ""  # plain, as on the page


def test_fail_prints_one_error_line_and_returns_the_status(capsys):
    from specchat.commands.common import fail
    from specchat.options import PROG

    assert fail("--prompt is empty") == 2
    assert fail("the run broke", 1, command="bench-page") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{PROG}: error: --prompt is empty\n{PROG} bench-page: error: the run broke\n"


def test_soak_runs_a_few_turns_and_writes_its_record(no_template_pair, tmp_path, monkeypatch, capsys):
    """``specchat soak``: a short soak on a tiny model keeps the engine's contract (status 0), prints
    its summary and writes the JSON record; a drafter the target lacks is one error line, status 2."""
    import json

    from specchat.commands.cli import main

    target, _ = no_template_pair
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    record = tmp_path / "soak" / "soak.json"
    common = ["soak", "--target", str(target), "--max-new-tokens", "4", "--context-length", "256"]
    status = main([*common, "--turns", "3", "--drafter", "ngram,none", "--cancel-every", "2", "--json", str(record)])
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    assert f"wrote {record}" in out and "wall time with loading" in out
    saved = json.loads(record.read_text())
    assert saved["settings"]["turns"] == 3 and len(saved["turns"]) == 3 and saved["summary"]["engine_idle_every_turn"]
    assert main([*common, "--drafter", "ngram,magic"]) == 2
    err = capsys.readouterr().err
    assert "error: --drafter 'ngram,magic': magic not available" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["soak", "--turns", "1"])
    assert exc.value.code == 2
