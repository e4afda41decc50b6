"""What the page and the terminal show, checked from first principles (issue 45, "a chat people keep
using"): a live reply's code is highlighted as the same reply restored after a reload; the
target-only wording agrees everywhere and with the CSS; a user's message is Markdown; the charts'
captions and labels are placed and sized to be read; the table's tok/s; the terminal's colours.

The browser side of the same (computed colours, rendered label sizes) is tests/test_browser_render.py.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from specchat.core.events import DoneEvent, StopReason, TokenEvent, TokenKind
from specchat.ui.html.markdown import block_html
from specchat.ui.html.render import CSS, ReplyRenderer, render_user, table_html
from specchat.ui.session.reply import Restored

A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET

REPLY = ("Here is **the** [function](https://example.com):\n\n"
         "```python\ndef add(a, b):\n    # sum\n    return a + b\n```\n\nDone.\n")


def live(text: str, size: int = 3) -> ReplyRenderer:
    """``text`` streamed as tokens of ``size`` characters, the kinds taking turns."""
    r = ReplyRenderer(key=1)
    for i in range(0, len(text), size):
        kind = (A, R, B, T)[i // size % 4]
        r.add_token(TokenEvent(i, kind, text[i:i + size], 0.9, 0.8 if kind is A else None, None, None, None,
                               i, 0, 0 if kind is T else 4))
    return r


class _Chains(HTMLParser):
    """Each visible character with the classes of the elements around it (outermost first), and
    the HTML again without the token spans (``stripped``): what the text looks like without them."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=False)
        self.stack: list[tuple[str, bool]] = []  # (class, is a token's span)
        self.chars: list[tuple[str, tuple[str, ...]]] = []
        self.out: list[str] = []
        self.skip = 0  # inside a rejected-drafts run
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        token = tag == "span" and cls.startswith("tok ")
        if self.skip or "spec-rejected-run" in cls:
            self.skip += 1
        elif not token:
            self.out.append(self.get_starttag_text())
        self.stack.append((cls, token))

    def handle_endtag(self, tag):
        _, token = self.stack.pop()
        if self.skip:
            self.skip -= 1
        elif not token:
            self.out.append(f"</{tag}>")

    def _text(self, text: str, raw: str):
        if self.skip:
            return
        self.out.append(raw)
        for ch in text:
            self.chars.append((ch, tuple(c for c, _ in self.stack)))

    def handle_data(self, data):
        self._text(data, data)

    def handle_entityref(self, name):
        self._text({"lt": "<", "gt": ">", "amp": "&", "quot": '"'}[name], f"&{name};")

    def handle_charref(self, name):
        self._text(chr(int(name[1:], 16) if name[:1] in "xX" else int(name)), f"&#{name};")

    @property
    def stripped(self) -> str:
        return "".join(self.out)

    def around(self, word: str) -> tuple[str, ...]:
        """The classes around the first character of the first occurrence of ``word`` in the text."""
        text = "".join(c for c, _ in self.chars)
        return self.chars[text.index(word)][1]


def _pygments(classes: tuple[str, ...]) -> str:
    """The innermost class that is not a token's span nor a code line: Pygments' token class."""
    return next((c for c in reversed(classes) if not c.startswith("tok ") and c != "spec-line"), "")


# ---- 1. a live reply renders as the same reply restored ------------------------------------------
def test_a_live_reply_without_its_token_spans_is_the_restored_reply():
    """Weaving the tokens in only adds spans: take them out and the live reply's HTML is, block for
    block, the HTML of the same text restored after a reload (which has no token spans)."""
    r = live(REPLY)
    restored = Restored("#1", REPLY, "").parts()["blocks"]
    live_html = [block_html(b) for b in r.blocks()]
    assert len(live_html) == len(restored) == 3  # a paragraph, the code block, a paragraph
    for got, want in zip(live_html, restored):
        assert _Chains(got).stripped == block_html(want)


@pytest.mark.parametrize("cut", [None, REPLY.index("sum") + 2, REPLY.index(" b\n```")])
def test_live_code_carries_pygments_classes_around_every_token_while_it_streams(cut):
    """Python's keywords, the function's name, a comment and an operator sit in Pygments' classes
    (k, nf, c1, o: its Python lexer's Keyword, Name.Function, Comment.Single, Operator), with the
    token's span inside them, in a finished reply and in one cut mid-stream (an open fence)."""
    text = REPLY if cut is None else REPLY[:cut]
    chains = _Chains("".join(block_html(b) for b in live(text).blocks()))
    for word, cls in (("def", "k"), ("add", "nf"), ("# su", "c1"), ("return", "k"), ("+", "o")):
        if word not in text.split("```python", 1)[1]:
            continue
        around = chains.around(word)
        assert _pygments(around) == cls, (word, around)
        assert around[-1].startswith("tok tok-"), (word, around)  # the token's span, innermost
    restored = _Chains("".join(block_html(b) for b in Restored("#1", text, "").parts()["blocks"]))
    assert [_pygments(c) for _, c in chains.chars] == [_pygments(c) for _, c in restored.chars]


def _rules(css: str) -> list[tuple[str, dict[str, str]]]:
    """(selector, {property: value}) for every rule of ``css`` (comments dropped, groups split)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    out = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decls = dict((k.strip(), v.strip()) for k, _, v in (d.partition(":") for d in body.split(";")) if v.strip())
        out += [(s.strip(), decls) for s in selectors.split(",")]
    return out


def _specificity(selector: str) -> tuple[int, int, int]:
    ids = len(re.findall(r"#[\w-]+", selector))
    classes = len(re.findall(r"\.[\w-]+|\[[^]]*\]|:(?!:)[\w-]+", selector))
    elements = len(re.findall(r"(?:^|[\s>+~])([a-z][\w-]*)", selector))
    return ids, classes, elements


def test_no_token_span_sets_a_text_colour_and_the_transcripts_take_their_parents():
    """Why live code was monochrome: Gradio's ``.gradio-container-6-31-0 .prose * { color:
    var(--body-text-color) }`` (specificity 0,2,0) gives every element the body colour, and the
    token's span is the innermost element, inside Pygments' coloured span (bold and italic are
    inherited, so they stayed). The page's CSS must set the token spans' colour to ``inherit`` with
    a higher specificity, and no rule may give a token kind a colour of its own."""
    rules = _rules(CSS)
    kinds = ("accepted", "resampled", "bonus", "target")
    for selector, decls in rules:
        last = selector.split()[-1]
        if re.search(r"\.tok(?:-(?:%s))?(?![\w-])" % "|".join(kinds), last) and "color" in decls:
            assert decls["color"] == "inherit", (selector, decls)
    inherit = [s for s, d in rules if d.get("color") == "inherit" and re.search(r"\.tok$", s)]
    assert inherit and max(_specificity(s) for s in inherit) > _specificity(".gradio-container-6-31-0 .prose *"), inherit
    assert any(".spec-md" in s for s in inherit)  # the replies' text (and the user's), code included


# ---- 2. one wording for target-only tokens -----------------------------------------------------
def test_the_header_the_explanation_and_the_legend_say_what_the_css_draws_for_target_only_tokens():
    """A target-only token has no tint, outline, underline or colour of its own in the page's CSS
    (and no style in the terminal): it is plain text, and every place that describes it says so."""
    from specchat.commands.common import TOKEN_STYLES
    from specchat.ui.html.render import TARGET_ONLY_LOOK, legend_html
    from specchat.ui.page.layout import EXPLAIN_MD, header_md

    target = [(s, d) for s, d in _rules(CSS) if re.search(r"\.tok-target(?![\w-])", s)]
    assert target
    for selector, decls in target:  # each rule takes something away (none), never adds a look
        assert all(v.removesuffix("!important").strip() in ("none", "transparent", "inherit") for v in decls.values()), (
            selector, decls)
    assert TOKEN_STYLES["target"] == ""
    assert "plain text" in TARGET_ONLY_LOOK and "grey" not in TARGET_ONLY_LOOK
    legend = legend_html()
    target_item = re.search(r'<span class="tok tok-target">target only</span><span class="spec-legend-text">([^<]*)<',
                            legend)
    assert target_item and target_item.group(1).startswith(TARGET_ONLY_LOOK + ":")
    header = header_md("some-model")
    assert f"({TARGET_ONLY_LOOK}: a round with no draft)" in header and "grey" not in header
    assert EXPLAIN_MD.count(TARGET_ONLY_LOOK) == 2 and "grey underline" not in EXPLAIN_MD


# ---- 3. the user's message as Markdown -----------------------------------------------------------
def test_a_users_message_is_markdown_its_code_highlighted_and_its_html_text():
    message = "Rename `x` in **this** and __repr__:\n\n```python\ndef f(x):\n    return x\n```\n<b>hi</b> & <img src=x onerror=alert(1)>"
    page = render_user(message)
    chains = _Chains(page)
    text = "".join(c for c, _ in chains.chars)
    assert "```" not in text  # the fences are Markdown, not text
    # a person's stars and underscores show as typed (a name such as __repr__ is not bold "repr")
    assert "Rename x in **this** and __repr__:" in text and "<strong>" not in page and "<em>" not in page
    assert "<code>x</code>" in page
    assert _pygments(chains.around("def")) == "k" and _pygments(chains.around("return")) == "k"
    assert text.endswith("<b>hi</b> & <img src=x onerror=alert(1)>\n")  # the HTML is the text shown
    assert "&lt;b&gt;hi&lt;/b&gt; &amp; &lt;img src=x onerror=alert(1)&gt;" in page  # escaped, so inert
    assert "<b>" not in page and "<img" not in page
    assert page.startswith('<div class="spec-md spec-user-md">')


def test_code_pasted_without_fences_keeps_its_indentation_in_the_users_message():
    page = render_user("Why does this fail?\ndef add(x, y):\n    return x + y\n```\n  kept = 1\n```")
    text = "".join(c for c, _ in _Chains(page).chars)
    assert "def add(x, y):\n\u00a0\u00a0\u00a0\u00a0return x + y" in text  # four spaces shown, no-break
    assert "  kept = 1" in text  # inside a fence the spaces are the code's own
    nested = render_user("- a\n  - b")
    assert nested.count("<ul>") == 2 and "\u00a0" not in nested  # a nested list stays a list


# ---- 4. the table's tok/s ----------------------------------------------------------------------
def test_the_table_has_the_replys_tokens_per_second_of_decoding():
    """The fake service's reply (tests/test_app.py's SCRIPT): 18 tokens in 7 rounds of 100 ms, plus
    10 ms per drafted token in the 6 drafting rounds (4 each): 100 + 6 × 140 = 940 ms of decoding,
    18 / 0.94 s = 19.1 tok/s, the stats line's speed."""
    from test_app import FakeService

    from specchat.ui.session.chat import ChatSession, ReplySettings

    s = ChatSession(FakeService())
    list(s.respond("hi", ReplySettings("int4", 4, True, 0.0, 1.0, 64)))
    row = s.views.latest.row()
    assert row["tokens_per_s"] == pytest.approx(18 / 0.94)
    table = s.views.table()
    head = re.findall(r"<th>([^<]*)</th>", table)
    cells = re.findall(r"<td>([^<]*)</td>", table)
    assert len(cells) == len(head) and cells[head.index("tok/s")] == "19.1"
    none = dict(row, tokens_per_s=None)  # a reply with no decoding time yet
    assert re.findall(r"<td>([^<]*)</td>", table_html([none]))[head.index("tok/s")] == "–"


# ---- 5. the charts ---------------------------------------------------------------------------------
def _no_gamma_pays():
    from test_charts import _metrics, _round

    rounds = [_round(i, 0, 0) for i in range(3)]
    for i, k in enumerate([2, 6] * 6):
        rounds.append(_round(i + 3, k, k - 1, round_ms=10.0 * k + 50.0 + 100.0 * (k + 1)))
    return _metrics(rounds)


@pytest.mark.parametrize("case", ["far", "none", "few"])
def test_the_theory_charts_captions_sit_between_its_title_and_its_plot(case):
    """Every caption of the theory chart (the verdict, adaptive γ's note, "too few") lies above the
    plot (paper y ≥ 1, anchored at its bottom) in a top margin grown by a line for each, so none
    can cross the curves or the axes; the legend starts LEGEND_GAP_PX under the plot, below the x
    axis's labels and title."""
    from test_charts import _alpha_08_c_01, _metrics, _round

    from specchat.ui.charts import theory
    from specchat.ui.charts.style import LEGEND_GAP_PX

    # far: γ = 4 drafted, the best is 6 (test_charts' worked example); none: no γ pays at the
    # measured costs (two captions); few: 5 judged drafts
    metrics = {"far": _alpha_08_c_01, "none": _no_gamma_pays,
               "few": lambda: _metrics([_round(0, 0, 0), _round(1, 3, 2), _round(2, 3, 1)])}[case]()
    fig = theory.theory_figure(metrics, 4 if case == "far" else None)
    captions = [a for a in fig.layout.annotations if a.xref == "paper" and a.yref == "paper"]
    assert captions, [a.text for a in fig.layout.annotations]
    for a in captions:
        assert a.y >= 1 and a.yanchor == "bottom" and a.yshift >= 0, a
    assert fig.layout.margin.t >= 40 + 14 * len(captions)
    assert len({a.yshift for a in captions}) == len(captions)  # one line each, not on top of each other
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert -fig.layout.legend.y * plot_px == pytest.approx(LEGEND_GAP_PX)


def test_conversation_bar_labels_are_never_smaller_than_11px_and_never_shrunk():
    """Plotly shrinks a bar's outside label to the bar's width unless told not to (constraintext):
    with a dozen replies the values came out at 2-5 px. Every label is BAR_LABEL_PX ≥ 11 and
    unshrinkable, and where a dozen replies leave no room side by side, turned upright."""
    from test_charts import _alpha_08_c_01

    from specchat.ui.charts import figures

    replies = [(i + 1, "ngram", _alpha_08_c_01()) for i in range(12)]
    for few, many in zip(figures.conversation_figures(replies[:2]), figures.conversation_figures(replies)):
        for fig, turned in ((few, 0), (many, -90)):
            assert fig.layout.xaxis.tickfont.size >= 11
            for bar in fig.data:
                assert bar.textfont.size >= 11 and bar.constraintext == "none", bar.name
                assert bar.textangle == turned, (bar.name, len(bar.x))


# ---- 6. the terminal -------------------------------------------------------------------------------
def _contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours."""
    def lum(h: str) -> float:
        c = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_terminals_bonus_colour_reads_on_black_in_true_colour_and_in_256():
    """On black, the page's bonus purple #7048e8 has a contrast of 3.8 (the 256-colour blue a
    terminal shows for it, #5f5fd7, 4.1): under WCAG's 4.5 for text. The terminal's shade clears
    4.5 both ways and stays readable on white (≥ 3, as the green and orange do)."""
    from rich.color import Color, ColorSystem

    from specchat.commands.common import TOKEN_STYLES

    assert _contrast("#7048e8", "#000000") < 4.5  # the page's, why the terminal has its own
    for kind in ("accepted", "resampled", "bonus"):
        colour = TOKEN_STYLES[kind]
        t = Color.parse(colour).downgrade(ColorSystem.EIGHT_BIT).get_truecolor()
        shown = f"#{t.red:02x}{t.green:02x}{t.blue:02x}"
        assert _contrast(colour, "#000000") >= 4.5 and _contrast(shown, "#000000") >= 4.5, (kind, colour, shown)
        assert _contrast(colour, "#ffffff") >= 3.0, (kind, colour)


def test_a_reply_that_ends_its_turn_before_a_token_says_so_not_an_empty_bubble():
    """A Continue of a reply that ended by itself often gets the end of turn at once: the bubble
    says nothing was written (it showed a bare "…"); a cut or stopped reply keeps its own words."""
    empty = ReplyRenderer(key=1)
    empty.finish(DoneEvent(StopReason.EOS, (), (), "", 0.0, 0.0, 0))
    assert "nothing written: the model ended its turn at once" in empty.status_html()
    for nothing in ("", "\n"):  # one token that shows nothing (a tester's Continue: "1 token" and a bare "…")
        one = ReplyRenderer(key=3)
        one.add_token(TokenEvent(7, T, nothing, 0.9, None, None, None, None, 0, 0, 0))
        one.finish(DoneEvent(StopReason.EOS, (7,), (), "", 0.0, 0.0, 0))
        assert "nothing written: the model ended its turn at once" in one.status_html(), repr(nothing)
    written = live("Hello there.")
    written.finish(DoneEvent(StopReason.EOS, (1, 2, 3), (), "", 0.0, 0.0, 0))
    assert written.status_html() == ""  # a reply that ended by itself, as usual: nothing to say
    cut = ReplyRenderer(key=2)
    cut.finish(DoneEvent(StopReason.MAX_NEW_TOKENS, (), (), "", 0.0, 0.0, 0))
    assert "max new tokens reached" in cut.status_html()

