"""The service's interface (specchat/service_api.py): both services offer every member of
ChatServiceProtocol (mypy checks the types; this checks that nothing is missing at run time, where
the page no longer probes with getattr), a Pick reads as a pair too, and the trace-only service
refuses to generate with a SpecchatError."""

from __future__ import annotations

import threading

import pytest

from specchat.core.config import GenerationConfig
from specchat.errors import SpecchatError
from specchat.service_api import ChatServiceProtocol, Pick


def protocol_members() -> set[str]:
    """Every member the protocol declares, but ``context_length`` (it raises without a target)."""
    members = set(ChatServiceProtocol.__annotations__)
    members |= {name for name in vars(ChatServiceProtocol) if not name.startswith("_")}
    return members - {"context_length"}


def test_a_pick_is_a_named_pair():
    pick = Pick("sibling", "measured fastest here")
    drafter, why = pick
    assert (pick[0], pick[1]) == (drafter, why) == (pick.drafter, pick.why) == ("sibling", "measured fastest here")


def test_the_trace_only_service_offers_the_whole_interface_and_refuses_to_generate():
    from specchat.ui.page.host import TraceOnlyService

    service = TraceOnlyService("smollm2-135m-instruct")
    assert {"stream_chat", "picked", "loading", "drafter_errors", "runtime_description"} <= protocol_members()
    missing = {m for m in protocol_members() if not hasattr(service, m)}
    assert not missing, missing
    assert service.ready.is_set() and not service.loading and service.startup_error is None
    assert service.drafter_kinds() == ["none"] and service.runtime_description("none") == ""
    assert service.banner and service.picked is None and service.model_sizes("none") is None
    with pytest.raises(SpecchatError, match="no model is loaded"):
        service.stream_chat([], "hi", drafter="none", config=GenerationConfig(), cancel=threading.Event())
    with pytest.raises(SpecchatError, match="no model is loaded"):
        _ = service.context_length


def test_the_chat_service_offers_the_whole_interface_before_loading():
    from specchat.service import ChatService

    service = ChatService(dtype="float32", device="cpu")  # loads nothing
    missing = {m for m in protocol_members() if not hasattr(service, m)}
    assert not missing, missing
    assert service.banner == "" and service.picked is None and not service.loading
    assert service.runtime_description() == "" and service.loaded_drafter("ngram") is None and service.idle()
    with pytest.raises(SpecchatError, match="not loaded"):
        _ = service.context_length
