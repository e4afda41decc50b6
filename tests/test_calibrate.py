"""The drafter picked by measurement: the pick from hand-made calibrations, the record kept per
machine and model pair (and redone when either changes), and a real calibration on SmolLM2 with
its int4 copy whose speedup is the drafter's rate over the target-only rates around it."""

from __future__ import annotations

import json

import pytest

from specchat.analysis import calibrate
from specchat.analysis.calibrate import Calibration, DrafterTiming
from specchat.service import ChatService

ALL = ["none", "ngram", "int4", "sibling", "sibling-int4", "hybrid"]


def record(*timings, key=None):
    drafters = [DrafterTiming(kind, 4.0 * s, s, 0.8, 50.0) for kind, s in timings]
    return Calibration(key or {"machine": "m"}, [4.0] * (len(drafters) + 1), drafters, 32, "2026-12-02T00:00:00Z")


def test_pick_prefers_hybrid_on_the_fastest_model_drafter_when_one_speeds_up():
    cal = record(("int4", 1.1), ("sibling", 1.6), ("sibling-int4", 1.4))
    assert cal.fastest.kind == "sibling"
    assert calibrate.pick(cal, ALL) == "hybrid"
    assert calibrate.pick(cal, ["none", "ngram", "int4", "sibling", "sibling-int4"]) == "sibling"
    reason = cal.reason("hybrid")
    assert "then sibling" in reason and "sibling 1.60×, sibling-int4 1.40×, int4 1.10×" in reason
    assert "2026-12-02" in reason and "32 tokens" in reason


def test_pick_falls_back_to_lookup_when_no_model_drafter_speeds_up():
    cal = record(("int4", 0.7), ("sibling", 0.95))
    assert calibrate.pick(cal, ALL) == "ngram"
    assert "no model drafter sped decoding up" in cal.reason("ngram")
    assert calibrate.pick(cal, ["none", "int4"]) == "none"
    assert calibrate.pick(record(), ALL) == "ngram"  # nothing could be timed


def test_without_a_calibration_the_fixed_order_decides():
    assert calibrate.pick(None, ALL) == "sibling-int4"
    assert calibrate.pick(None, ["none", "ngram", "int4", "hybrid"]) == "int4"


def test_the_record_is_kept_per_key_and_survives_bad_files(tmp_path):
    path = tmp_path / "calibration.json"
    a, b = record(("sibling", 1.5), key={"m": "a"}), record(("int4", 0.9), key={"m": "b"})
    assert calibrate.load({"m": "a"}, path) is None  # no file yet
    calibrate.save(a, path)
    calibrate.save(b, path)
    assert calibrate.load({"m": "a"}, path) == a and calibrate.load({"m": "b"}, path) == b
    assert calibrate.load({"m": "c"}, path) is None  # another machine or model pair: calibrate again
    newer = record(("sibling", 2.0), key={"m": "a"})
    calibrate.save(newer, path)  # replaces a, keeps b
    assert calibrate.load({"m": "a"}, path).fastest.speedup == 2.0
    assert len(json.loads(path.read_text())) == 2
    data = json.loads(path.read_text())
    data[0]["version"] = 0  # a record of an older shape is ignored
    path.write_text(json.dumps(data))
    assert calibrate.load(data[0]["key"], path) is None
    path.write_text("{not json")
    assert calibrate.load({"m": "a"}, path) is None
    calibrate.save(a, path)  # a damaged file is replaced
    assert calibrate.load({"m": "a"}, path) == a


def test_the_key_changes_with_the_model_pair_and_the_dtype():
    default = calibrate.calibration_key(ChatService(dtype="bfloat16", device="cpu"))
    assert len(default["models"]) == 2  # the default target and its sibling
    assert calibrate.calibration_key(ChatService(dtype="bfloat16", device="cpu")) == default
    assert calibrate.calibration_key(ChatService(dtype="float32", device="cpu"))["dtype"] == "float32"
    smol = calibrate.calibration_key(ChatService(target="smollm2-135m-instruct", dtype="bfloat16", device="cpu"))
    assert smol["models"] == ["smollm2-135m-instruct"] and smol["models_hash"] != default["models_hash"]
    for field in ("processor", "cpu_count", "torch_threads", "torch", "transformers", "bitsandbytes"):
        assert field in default


def test_a_real_calibration_on_smollm2_and_its_int4_copy(smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(smollm2_dir.parent.parent))  # the converted model is there
    monkeypatch.setattr(calibrate, "default_path", lambda: tmp_path / "calibration.json")
    service = ChatService(target="smollm2-135m-instruct", dtype="float32", device="cpu")
    service.load()
    assert service.hybrid_part() == "int4"  # no sibling: the int4 copy, before any calibration
    kind, reason = service.pick_drafter()
    cal = service.calibration
    assert [d.kind for d in cal.drafters] == ["int4"] and len(cal.target_tokens_per_s) == 2
    timing = cal.drafters[0]
    assert timing.speedup == pytest.approx(timing.tokens_per_s / (sum(cal.target_tokens_per_s) / 2))
    assert timing.alpha is not None and 0.0 <= timing.alpha <= 1.0 and timing.draft_ms_per_token > 0
    assert kind == ("hybrid" if timing.speedup > 1.0 else "ngram") and "int4" in reason
    assert "int4" not in service._drafters or kind == "hybrid"  # timed only: released
    # the next start reads the record instead of measuring again
    again = ChatService(target="smollm2-135m-instruct", dtype="float32", device="cpu")
    again.load()
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: pytest.fail("calibrated again"))
    assert again.pick_drafter() == (kind, reason)
    assert again.hybrid_part() == "int4"


def test_the_menu_says_what_each_calibrated_drafter_costs_here():
    """Target-only rates 10, 12 and 11 tok/s (median 11: t₁ = 1000/11 ms); a drafted token of the
    sibling took 40 ms (c = 40·11/1000 = 0.44) and of the int4 copy 140 ms (c = 1.54: a draft
    step costs more than a target step, so no α can pay). An untimed kind keeps its plain name."""
    from specchat.analysis.calibrate import menu_label

    record = Calibration({"machine": "m"}, [10.0, 12.0, 11.0], [DrafterTiming("sibling", 9.0, 0.8, 0.6, 40.0),
                                                                 DrafterTiming("int4", 5.0, 0.45, 0.9, 140.0)],
                         32, "2026-12-06T00:00:00Z")
    assert record.cost_ratio("sibling") == pytest.approx(0.44) and record.cost_ratio("int4") == pytest.approx(1.54)
    assert menu_label("sibling", record) == "sibling · costs 0.44 target steps a token here"
    assert menu_label("int4", record) == "int4 · costs 1.54 target steps a token here: cannot pay"
    assert menu_label("ngram", record) == "ngram" and menu_label("sibling", None) == "sibling"
    # with the tokens drafted a round kept (c is dearer when fewer are drafted a round)
    record.drafters[0] = DrafterTiming("sibling", 9.0, 0.8, 0.6, 40.0, 6.6)
    assert menu_label("sibling", record) == "sibling · costs 0.44 target steps a token here (7 drafted a round)"
    assert Calibration.from_json(record.to_json()).drafters[0].drafted_per_round == 6.6
    record.drafters[0] = DrafterTiming("sibling", 9.0, 0.8, 0.6, 40.0)

    class Service:
        calibration = record
        kinds = ["none", "ngram", "int4", "sibling", "hybrid"]

        def hybrid_part(self):
            return "sibling"

    from specchat.commands.common import drafter_cost_note
    from specchat.ui.page.layout import drafter_menu

    assert drafter_menu(Service(), Service.kinds, True) == [
        ("auto: picked by measurement", "auto"), ("none", "none"), ("ngram", "ngram"),
        ("int4 · costs 1.54 target steps a token here: cannot pay", "int4"), ("sibling · costs 0.44 target steps a token here", "sibling"),
        ("hybrid (lookup, then sibling) · costs 0.44 target steps a token here", "hybrid")]
    assert drafter_cost_note(Service(), "int4") == ("int4 · costs 1.54 target steps a token here: cannot pay "
                                                    "(calibrated 2026-12-06)")
    assert drafter_cost_note(Service(), "sibling") is None


def test_a_calibration_on_a_busy_machine_is_measured_again_then_flagged(monkeypatch):
    """Target-only rates 10 then 6 tok/s (spread 4/8 = 50 % > 25 %): measured again; the second
    pass (10, 9.6: 4 %) is kept. When both passes scatter, the steadier is kept and the record
    says the machine was busy, in the pick's reason too."""
    from specchat.analysis import calibrate as cal

    class Service:
        runtime = "llamacpp"
        drafter_errors: dict = {}

        def model_drafter_kinds(self):
            return ["sibling"]

        def prepare_drafter(self, kind):
            pass

        def warm_up(self, kind, num_tokens):
            pass

        def encode_chat(self, history, message, max_new_tokens):
            return [1, 2, 3], None

    def scripted(rates):
        it = iter(rates)

        def reply(service, prompt_ids, kind, num_tokens):
            if num_tokens == 4:  # the untimed warm-up
                return 1.0, None, None, None
            drafted = kind != "none"
            return next(it), (0.5 if drafted else None), (30.0 if drafted else None), (4.0 if drafted else None)
        return reply

    monkeypatch.setattr(cal, "calibration_key", lambda service: {"machine": "m"})
    said = []
    # pass 1: none 10, sibling 8, none 6; pass 2: none 10, sibling 9, none 9.6
    monkeypatch.setattr(cal, "_reply", scripted([10.0, 8.0, 6.0, 10.0, 9.0, 9.6]))
    record = cal.calibrate(Service(), progress=said.append)
    assert record.target_tokens_per_s == [10.0, 9.6] and record.unsteady is None
    assert any("varied by 50% (a busy machine?" in s and "--threads" in s and s.endswith("measuring again") for s in said)
    assert record.drafters[0].speedup == pytest.approx(9.0 / 9.8)
    monkeypatch.setattr(cal, "_reply", scripted([10.0, 8.0, 6.0, 10.0, 8.0, 7.0]))  # 50 %, then 30 %
    busy = cal.calibrate(Service())
    assert busy.target_tokens_per_s == [10.0, 7.0] and busy.unsteady == pytest.approx(3.0 / 8.5)
    assert "target-only speed varied by 35% while it was measured (a busy machine)" in busy.reason("ngram")
    assert "`--threads` below the number of cores" in busy.reason("ngram")
    assert cal.Calibration.from_json(busy.to_json()).unsteady == pytest.approx(busy.unsteady)
