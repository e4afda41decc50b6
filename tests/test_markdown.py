"""specchat.ui.html.markdown: a reply as Markdown with its tokens woven in, checked from first principles.

The reference for the visible text is markdown-it itself (the same renderer without tokens):
weaving may only wrap text in spans, never change it. The reference for each span is the
token list written in the test: every non-blank piece of text inside a token's spans is text
that token wrote, and a token whose characters are all shown shows all of them.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from types import SimpleNamespace

from specchat.core.events import TokenEvent, TokenKind
from specchat.ui.html.markdown import MD, block_html, code_lines
from specchat.ui.html.render import ReplyRenderer

A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET


def reply_of(pieces: list[tuple[str, TokenKind]], key: int = 7) -> ReplyRenderer:
    r = ReplyRenderer(key=key)
    for i, (text, kind) in enumerate(pieces):
        r.add_token(TokenEvent(i, kind, text, 0.9, None if kind is T else 0.8, None, None, None, 0, 0, 4))
    return r


class _Spans(HTMLParser):
    """The text under each tref class, the whole visible text, and the text outside code bars."""

    def __init__(self):
        super().__init__()
        self.stack: list[str | None] = []
        self.by_ref: dict[str, str] = {}
        self.text = ""
        self.bar_depth = 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        ref = next((c for c in cls.split() if c.startswith("tref-")), None)
        if "spec-code-bar" in cls or self.bar_depth:
            self.bar_depth += 1
        self.stack.append(ref)

    def handle_endtag(self, tag):
        self.stack.pop()
        if self.bar_depth:
            self.bar_depth -= 1

    def handle_data(self, data):
        if self.bar_depth:
            return
        self.text += data
        ref = next((r for r in reversed(self.stack) if r), None)
        if ref:
            self.by_ref[ref] = self.by_ref.get(ref, "") + data


def spans(html_text: str) -> _Spans:
    p = _Spans()
    p.feed(html_text)
    return p


def visible(html_text: str) -> str:
    return spans(html_text).text


SOURCE = [
    ("Here", A), (" is", R), (" **", B), ("the", B), ("**", T), (" code", A), (":\n\n", A),
    ("```", T), ("python", T), ("\n", T), ("def", R), (" f", A), ("(x", A), ("):\n", B),
    ("    return", A), (" x", A), (" <", R), (" 2", B), (" and", T), (" '", A), ("a&b", A), ("'\n", A),
    ("```", T), ("\n\n", T), ("- one", A), (" `two`", B), ("\n- three", R), ("\n\n", T),
    ("Done", T), (" &", A), (" <b>x</b>", R), (".", B),
]


def test_the_visible_text_is_markdown_its_own_and_each_token_span_holds_only_that_tokens_text():
    r = reply_of(SOURCE)
    woven = "".join(block_html(b) for b in r.blocks())
    source = "".join(t for t, _ in SOURCE)
    # weaving wraps text, never changes it (blank lines between blocks are layout)
    assert re.sub(r"\n+", "\n", visible(woven)) == re.sub(r"\n+", "\n", visible(MD.render(source)))
    seen = spans(woven).by_ref
    for i, (text, _kind) in enumerate(SOURCE):
        shown = seen.get(f"tref-7-{i}", "")
        # a span holds characters of its own token only, in order (markup such as ** or ``` is
        # not shown, and blank text between tags is layout, not a token's)
        it = iter(text)
        assert all(ch in it for ch in shown), (i, text, shown)
    for i in (0, 1, 3, 5, 10, 11, 12, 20, 28, 30):  # fully shown tokens show every character but
        # blanks that stand between Pygments' spans (layout there, so not tinted)
        assert seen[f"tref-7-{i}"].strip() == SOURCE[i][0].replace("**", "").strip("`").strip(), i
    assert seen["tref-7-30"] == " <b>x</b>"  # model HTML is text
    assert "<b>" not in woven and "&lt;b&gt;x&lt;/b&gt;" in woven


def test_a_fenced_block_is_highlighted_code_with_a_copy_button_and_its_lines_apart():
    r = reply_of(SOURCE)
    blocks = r.blocks()
    code = next(b for b in blocks if isinstance(b, dict))
    assert code["head"].startswith('<div class="spec-code" data-lang="python"><div class="spec-code-bar">')
    assert '<button type="button" class="spec-copy"' in code["head"]
    assert code["head"].endswith('<pre><code class="language-python">') and code["tail"] == "</code></pre></div>"
    assert [visible(line) for line in code["lines"]] == ["def f(x):", "    return x < 2 and 'a&b'"]
    # Pygments' spans: "def" and "return" are keywords (class k), around the token spans
    assert re.search(r'<span class="k"><span class="tok tok-resampled tref-7-10"[^>]*>def</span></span>', code["lines"][0])
    for line in code["lines"]:  # each line is whole HTML: every span it opens, it closes
        assert line.count("<span") == line.count("</span>")


def test_a_line_in_progress_is_its_own_line_and_a_finished_block_is_the_same_object():
    r = reply_of([("Intro", A), ("\n\n", T), ("```", T), ("py", T), ("\n", T), ("a", A), (" = ", A), ("1\n", B),
                  ("b", A)])
    first = r.blocks()
    assert [visible(line) for line in first[1]["lines"]] == ["a = 1", "b"]
    r.add_token(TokenEvent(9, TokenKind.ACCEPTED, " = 2", 0.9, 0.8, None, None, None, 0, 0, 4))
    second = r.blocks()
    assert second[0] is first[0]  # the paragraph above did not change: not rendered again
    assert second[1]["lines"][0] == first[1]["lines"][0] and visible(second[1]["lines"][1]) == "b = 2"


def test_code_lines_split_spans_that_cross_a_newline_and_join_back():
    body = '<span class="s">"""one\ntwo"""</span>\n<span class="k">x</span>\n'
    head, tail = '<div class="spec-code" data-lang="py"><pre><code class="language-py">', "</code></pre></div>"
    block = code_lines(head + body + tail)
    assert block["lines"] == ['<span class="s">"""one</span>', '<span class="s">two"""</span>', '<span class="k">x</span>']
    assert visible(block_html(block)) == '"""one\ntwo"""\nx\n'


def test_rejected_drafts_come_just_before_the_token_that_replaced_them_and_never_break_a_line():
    # a round drafted " =", " 5\n", "\n": the first kept, the second rejected, the third never judged
    trace = SimpleNamespace(drafted=[SimpleNamespace(token_id=i) for i in (11, 12, 13)], rejected_index=1,
                            token_texts={11: " =", 12: " 5\n", 13: "\n"})
    r = reply_of([("```", T), ("\n", T), ("x", A), (" =", A)])
    r.add_token(TokenEvent(4, TokenKind.RESAMPLED, " 4", 0.9, None, 0.1, 0.7, None, 0, 1, 4))
    r.add_round(SimpleNamespace(trace=trace))
    line = r.blocks()[0]["lines"][0]
    run = re.search(r'<span class="spec-rejected-run">.*?</span></span>', line).group(0)
    assert line.index(run) < line.index("tref-7-4")  # the rejected drafts, then the resampled token
    assert visible(run) == " 5↵↵" and "\n" not in run
    assert '<span class="tok-rejected"' in run and '<span class="tok-unjudged"' in run
    assert visible(line) == "x = 5↵↵ 4"  # shown only with "show rejected drafts" (a class on the transcript)


def test_hostile_text_stays_text():
    evil = ['<img src=x onerror="alert(1)">', "<script>alert(2)</script>", "[x](javascript:alert(3))",
            "![i](http://evil.example/p.png)", "```\n</code></pre><script>alert(4)</script>\n```"]
    r = reply_of([(t + "\n\n", A) for t in evil])
    woven = "".join(block_html(b) for b in r.blocks())
    assert "<script" not in woven and "<img" not in woven and 'href="javascript' not in woven
    assert visible(woven).count("alert(") == 4  # all four shown as text
    # no image is fetched: Markdown's image is off, so it is a link that opens beside the chat
    assert '<a href="http://evil.example/p.png" target="_blank" rel="noopener noreferrer">' in woven


def test_open_fence_is_the_line_of_a_code_block_left_open_by_commonmarks_closing_rule():
    from specchat.ui.html.markdown import open_fence

    assert open_fence("Here:\n\n```python\nx = 1\ny =") == "```python\n"
    assert open_fence("```python\nx = 1\n") == "```python\n"  # a newline is not a closing fence
    assert open_fence("```py") == "```py\n"  # cut right after the fence line
    assert open_fence("```py\nx\n```") == "" and open_fence("```py\nx\n```\n\nDone.") == ""
    assert open_fence("~~~~\nx\n~~~") == "~~~~\n"  # a shorter closing fence does not close
    assert open_fence("```\nx\n    ```") == "```\n"  # indented four spaces: code, not a fence
    assert open_fence("```\na\n```\n\nmore\n\n```js\nlet x") == "```js\n"  # the last block counts
    assert open_fence("- item\n  ```\n  x") == ""  # inside a list: not reopened
    assert open_fence("plain text") == "" and open_fence("") == ""


def test_a_continuations_lead_is_the_open_fence_then_the_line_cut_mid_way():
    from specchat.ui.html.markdown import continuation_lead

    assert continuation_lead("Fruits:\n\n1. Apple\n2. Banana\n10") == "10"  # a list item's number, cut
    assert continuation_lead("Here:\n\n```python\nx = 1\ny =") == "```python\ny ="  # the code line goes on
    assert continuation_lead("```python\nx = 1\n") == "```python\n"  # cut at a line's end inside code
    assert continuation_lead("```py") == "```py"  # cut on the fence line: it is that line, once
    assert continuation_lead("A paragraph.\n") == "" and continuation_lead("") == ""
    assert continuation_lead("- one\n- tw") == "- tw" and continuation_lead("| a | b |\n| 1 |") == "| 1 |"
    assert continuation_lead("## Sec") == "## Sec" and continuation_lead("4) x") == "4) x"
    assert continuation_lead("One.\n\nTwo half") == "" and continuation_lead("1, 2, 3, 4") == ""  # paragraphs


def test_a_continuation_of_a_cut_numbered_list_keeps_its_numbers_and_shows_the_lead_muted():
    # the reply above ended "…\n3. Cherry is a red fr": CommonMark would read "4. Date" after a
    # paragraph as text (only a list starting at 1 may interrupt one); read after the lead it is item 4
    r = ReplyRenderer(key=2)
    r.continue_inside("3. Cherry is a red fr")
    for i, (text, kind) in enumerate([("uit", A), (".\n", B), ("4", A), (". Date", T)]):
        r.add_token(TokenEvent(i, kind, text, 0.9, None if kind is T else 0.8, None, None, None, 0, 0, 4))
    assert r.text == "uit.\n4. Date"
    (block,) = r.blocks()
    html_ = block_html(block)
    assert html_.startswith('<ol start="3">') and html_.count("<li>") == 2
    assert '<span class="spec-lead" title="written in the reply above">Cherry is a red fr</span>' in html_
    assert visible(html_).split() == ["Cherry", "is", "a", "red", "fruit.", "Date"]
    assert "tok-accepted tref-2-0" in html_ and "tok-target tref-2-3" in html_

    after_ten = ReplyRenderer(key=1)
    after_ten.continue_inside("10")  # the reply above ended "…9. Lemon\n10"
    after_ten.add_token(TokenEvent(0, A, ". Orange", 0.9, 0.8, None, None, None, 0, 0, 4))
    (item,) = after_ten.blocks()
    assert block_html(item).startswith('<ol start="10">') and visible(block_html(item)).strip() == "Orange"


def test_a_continuation_cut_inside_a_code_block_renders_as_code_with_its_tokens():
    r = ReplyRenderer(key=3)
    r.continue_inside("```python\n")
    for i, (text, kind) in enumerate([("2", A), ("\n", A), ("z = 3", B), ("\n```", T), ("\n\nDone", R), (".", A)]):
        r.add_token(TokenEvent(i, kind, text, 0.9, None if kind is T else 0.8, None, None, None, 0, 0, 4))
    assert r.text == "2\nz = 3\n```\n\nDone."  # the lead is not the reply's text
    code, after = r.blocks()
    assert code["head"].startswith('<div class="spec-code" data-lang="python">')
    assert [visible(line) for line in code["lines"]] == ["2", "z = 3"]
    assert 'tref-3-0' in code["lines"][0] and 'tok-bonus tref-3-2' in code["lines"][1]
    assert visible(after).strip() == "Done." and "tok-resampled tref-3-4" in after
    try:
        r.continue_inside("```\n")
    except ValueError:
        pass
    else:
        raise AssertionError("a lead after the first token must be refused")


def test_a_comma_in_text_may_break_a_line_but_not_in_code():
    """"1,2,3,…" has no break opportunity of its own (UAX #14: no break between a comma and a
    digit): each comma outside code is followed by <wbr>, which adds no character to the text."""
    r = ReplyRenderer(key=0)
    for i, text in enumerate(["1,2", ",3", "\n\n```\n", "a,b", "\n```"]):
        r.add_token(TokenEvent(i, A, text, 0.9, 0.8, None, None, None, 0, 0, 4))
    para, code = r.blocks()
    assert para.count(",<wbr>") == 2 and visible(para).strip() == "1,2,3"
    assert "<wbr>" not in block_html(code) and [visible(line) for line in code["lines"]] == ["a,b"]


def test_a_persons_message_shows_names_as_typed_not_as_emphasis():
    """A new user's message "…withdraw and __repr__ methods." showed a bold "repr": a person's
    message is Markdown without emphasis (code blocks, lists and links stay)."""
    from specchat.ui.html.render import render_user

    shown = render_user("Add __repr__ and *args to it:\n\n- one\n\n```py\nx = 1\n```")
    assert "<strong>" not in shown and "<em>" not in shown
    assert visible(shown).startswith("Add __repr__ and *args to it:") and "<li>one</li>" in shown
    assert 'data-lang="py"' in shown
