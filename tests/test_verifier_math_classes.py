"""Round-3 classes of boxed_math (docs/verifiers.md, "Round-3 decisions"), each enumerated.

Every rule named in rlvr/verifiers/math is tested over its class, not one example:
units (every unit of the table x {same, other unit, none}, every spelling), degree signs,
labels (``v =``) and relations in either direction, TeX spellings that render the same
(each one as candidate and as gold), lists and sets in any order and in words, and the
rules that came from Math-Verify's regression suite (tests/test_math_verify_suite.py).
The hedging guard is checked against every new way of listing several values.
"""

from __future__ import annotations


import pytest

from rlvr.verifiers.math import answer_key, boxed_math, clear_caches
from rlvr.verifiers.math.normalise import _DELIMITER_WORDS, _UNIT_ALIASES, _unit_key


def box(content: str) -> str:
    return f"Reasoning... so the answer is \\boxed{{{content}}}."


def score(content: str, gold: str) -> float:
    return boxed_math(box(content), gold)


# ------------------------------------------------------------ units, compared not erased

# every spelling of the unit table except the placeholder "unit" (which names no unit)
UNIT_SPELLINGS = sorted(s for s in _UNIT_ALIASES if s != "unit")


def other_unit(spelling: str) -> str:
    """A unit that is not the one ``spelling`` names."""
    return "kg" if _unit_key(spelling) != "kg" else "cm"


@pytest.mark.parametrize("spelling", UNIT_SPELLINGS)
def test_every_unit_same_none_or_other(spelling: str) -> None:
    gold = rf"7\text{{ {spelling}}}"
    assert score(rf"7\text{{ {spelling}}}", gold) == 1.0  # the same unit
    assert score("7", gold) == 1.0  # no unit: the number asked for
    assert score(rf"7\text{{ {other_unit(spelling)}}}", gold) == 0.0  # another unit
    assert score(rf"8\text{{ {spelling}}}", gold) == 0.0  # the unit never rescues a value
    assert score(rf"7\text{{ {spelling}}}", "7") == 1.0  # a gold without a unit takes any


PLURALS = [s for s in UNIT_SPELLINGS if len(s) > 2 and s.isalpha() and not s.endswith("s")]


@pytest.mark.parametrize("spelling", PLURALS)
def test_plural_and_singular_are_one_unit(spelling: str) -> None:
    plural = spelling + ("es" if spelling.endswith(("ch", "sh", "x")) else "s")
    assert score(rf"7\text{{ {plural}}}", rf"7\text{{ {spelling}}}") == 1.0
    assert score(rf"7\text{{ {spelling}}}", rf"7\text{{ {plural}}}") == 1.0


# one unit, every way of writing it after a number
CM_SPELLINGS = [
    r"\text{ cm}", r"\text{cm}", r"\mbox{cm}", r"\mathrm{cm}", r"\,\text{cm}", r"\ \mathrm{cm}",
    r"\textup{cm}", r"\textrm{cm}", r"\textbf{cm}", r"\textit{cm}", r"\textsf{cm}", r"\texttt{cm}",
    r"\emph{cm}", r"\mathit{cm}", r"\mathbf{cm}", r"\mathsf{cm}", r"\operatorname{cm}", " cm", "cm",
    r"\mathrm{~cm}", r"~\text{cm}", r"\text{ cm.}",
    r"\text{ centimeters}", r"\text{ centimetre}", r"\text{ Centimeters}",
]
CM2_SPELLINGS = [
    "cm^2", " cm^{2}", r"\text{cm}^2", r"\text{ cm}^{2}", r"\mathrm{cm}^2", r"\,\mathrm{cm}^{2}",
    r"\text{ cm^2}", r"\text{ square centimeters}", r"\text{ sq cm}", r"\text{ sq. cm}",
]
KMH_SPELLINGS = [
    r"\text{ km/h}", r"\text{ kph}", r"\text{ km per hour}", r"\text{ kilometers per hour}",
    r"\text{ km}/\text{h}", r"\,\mathrm{km}/\mathrm{h}", " km/h", r"\text{ km/hr}",
]
SPELLING_GROUPS = [CM_SPELLINGS, CM2_SPELLINGS, KMH_SPELLINGS]


@pytest.mark.parametrize(
    ("spelling", "same"),
    [(s, t) for group in SPELLING_GROUPS for s in group for t in (group[0], group[-1])],
)
def test_unit_spellings_are_one_unit(spelling: str, same: str) -> None:
    assert score("12" + spelling, "12" + same) == 1.0
    assert score("12" + same, "12" + spelling) == 1.0
    assert score("12" + spelling, "12") == 1.0
    assert score("12", "12" + spelling) == 1.0


@pytest.mark.parametrize(
    ("spelling", "other"),
    [(s, o) for i, group in enumerate(SPELLING_GROUPS) for s in group for o in SPELLING_GROUPS[i - 1][:2]],
)
def test_unit_spellings_of_other_units_differ(spelling: str, other: str) -> None:
    assert score("12" + spelling, "12" + other) == 0.0
    assert score("12" + other, "12" + spelling) == 0.0


# no conversion is ever made: a converted value scores 0 (documented)
CONVERSIONS = [
    (r"0.07\text{ m}", r"7\text{ cm}"),
    (r"700\text{ cm}", r"7\text{ m}"),
    (r"420\text{ s}", r"7\text{ min}"),
    (r"7000\text{ g}", r"7\text{ kg}"),
    (r"1\text{ h}", r"60\text{ min}"),
    (r"\frac{\pi}{6}", r"30^\circ"),
    (r"30^\circ", r"\frac{\pi}{6}"),
    (r"\frac{\pi}{6}\text{ rad}", r"30^\circ"),
    (r"45^\circ\text{ F}", r"45^\circ\text{ C}"),
    (r"7\text{ cm}", r"7\text{ cm}^2"),
    (r"7\text{ m/s}", r"7\text{ m}"),
]


@pytest.mark.parametrize(("cand", "gold"), CONVERSIONS)
def test_no_unit_conversion(cand: str, gold: str) -> None:
    assert score(cand, gold) == 0.0


UNIT_HEDGES = [
    (r"7\text{ cm or 8 cm}", r"7\text{ cm}"),
    (r"7\text{ cm}\text{ (or 8)}", "7"),
    (r"7\text{ m or cm}", r"7\text{ cm}"),
    (r"7\text{ cm apples}", "7"),
    (r"7\text{ cm per}", "7"),
    (r"7\text{ square}", "7"),
]


@pytest.mark.parametrize(("cand", "gold"), UNIT_HEDGES)
def test_text_that_is_not_only_units_stays(cand: str, gold: str) -> None:
    assert score(cand, gold) == 0.0


def test_every_box_is_compared_with_its_unit() -> None:
    gold = r"7\text{ cm}"
    assert boxed_math(r"\boxed{7\text{ m}} so \boxed{7\text{ cm}}", gold) == 0.0
    assert boxed_math(r"\boxed{7\text{ cm}} so \boxed{7\text{ m}}", gold) == 0.0
    assert boxed_math(r"\boxed{7} so \boxed{7\text{ cm}}", gold) == 1.0
    assert boxed_math(r"\boxed{(7\text{ cm}, 3\text{ m})}", r"(7\text{ cm}, 3\text{ cm})") == 0.0
    assert boxed_math(r"\boxed{(7\text{ cm}, 3)}", r"(7, 3\text{ cm})") == 1.0


DOLLARS = [
    (r"\$5", "5", 1.0),
    ("5", r"\$5", 1.0),
    (r"5\text{ dollars}", r"\$5", 1.0),
    (r"\$5", r"5\text{ USD}", 1.0),
    (r"5\text{ cents}", r"\$5", 0.0),  # a dollar sign is the unit dollar
    (r"\$0.05", r"5\text{ cents}", 0.0),  # no conversion
    (r"\$5", r"5\text{ euros}", 0.0),
]


@pytest.mark.parametrize(("cand", "gold", "expected"), DOLLARS)
def test_a_dollar_sign_is_a_unit(cand: str, gold: str, expected: float) -> None:
    assert score(cand, gold) == expected


def test_answer_key_keeps_the_unit() -> None:
    assert answer_key(box(r"7\text{ cm}")) == answer_key(box(r"7\,\mathrm{centimeters}")) == "7 [cm]"
    assert answer_key(box(r"7\text{ m}")) != answer_key(box(r"7\text{ cm}"))
    assert answer_key(box(r"0.5")) == "1/2"


# --------------------------------------------------- degree signs, after plain numbers

DEGREE_SIGNS = [
    r"^\circ", r"^{\circ}", r"\degree", "\u00b0", "\\text{\u00b0}", r"\text{ }^\circ", r"\text{ degrees}",
    r"\,^{\circ}", r"\mathrm{^\circ}", r"\text{ deg}",
]
PLAIN_ANGLES = ["45", "22.5", r"\frac{45}{2}", "-30", "0"]
NOT_PLAIN = [r"\frac{\pi}{6}", r"2\sqrt{3}", "x", r"\pi", r"\frac{1}{2}\pi"]


@pytest.mark.parametrize("sign", DEGREE_SIGNS)
@pytest.mark.parametrize("angle", PLAIN_ANGLES)
def test_degree_sign_after_a_plain_number(sign: str, angle: str) -> None:
    assert score(angle + sign, angle) == 1.0
    assert score(angle, angle + sign) == 1.0
    assert score(angle + sign, angle + r"^\circ") == 1.0
    assert score(angle + r"^\circ", angle + sign) == 1.0


@pytest.mark.parametrize("sign", DEGREE_SIGNS)
@pytest.mark.parametrize("value", NOT_PLAIN)
def test_degree_sign_after_anything_else_is_degrees(sign: str, value: str) -> None:
    assert score(value + sign, value) == 0.0  # \frac{\pi}{6}^\circ is not \frac{\pi}{6}
    assert score(value + sign, value + r"^\circ") == 1.0  # unless the gold is in degrees
    assert score(value, value + sign) == 1.0  # a gold's unit may be left out


def test_temperatures() -> None:
    assert score("45\u00b0", r"45^\circ\text{ C}") == 1.0  # a bare degree sign for a temperature
    assert score(r"45\text{ degrees Celsius}", r"45^\circ C") == 1.0
    assert score("45\u00b0C", r"45\text{ celsius}") == 1.0
    assert score(r"45^\circ\text{ C}", r"45^\circ") == 0.0  # a temperature is not an angle
    assert score(r"45^\circ\text{ C}", r"45^\circ\text{ F}") == 0.0


# ----------------------------------------------------- labels: "v =" and relations

VARIABLES = ["x", "y", "n", "a", "t", "k", r"\theta", r"\alpha", r"\lambda"]


@pytest.mark.parametrize("v", VARIABLES)
def test_a_label_is_dropped_when_not_on_the_right(v: str) -> None:
    assert score(f"{v} = 2u + 1", "2u + 1") == 1.0
    assert score("2u + 1", f"{v} = 2u + 1") == 1.0
    assert score(f"2u + 1 = {v}", "2u+1") == 1.0
    assert score(f"{v} = 5", "5") == 1.0
    assert score("5", f"{v}=5") == 1.0
    assert score(f"{v} = 6", "5") == 0.0


@pytest.mark.parametrize("v", VARIABLES)
def test_a_label_on_the_right_is_an_equation(v: str) -> None:
    assert score(f"{v} = 2{v} + 1", f"w = 2{v} + 1") == 0.0  # x = 2x + 1 is not y = 2x + 1
    assert score(f"{v} = 2{v} + 1", f"2{v} + 1") == 0.0
    assert score(f"2{v} + 1", f"{v} = 2{v} + 1") == 0.0
    assert score(f"{v} = 2{v} + 1", f"{v} = 1 + 2{v}") == 1.0  # the same equation
    assert score(f"2{v} + 1 = {v}", f"{v} = 2{v} + 1") == 1.0  # read right to left


LABELS = [
    "x_1", "V_{1}", "a_n", "f(x)", "f(2)", "P(A)", "g(x, y)", "AB", "ABC", "|AB|", r"\angle A",
    r"\angle ABC", r"\overline{AB}", r"\frac{NO}{BO}", "A:B", "V_1:V_2", r"m\angle ABC",
]


@pytest.mark.parametrize("label", LABELS)
def test_labels_name_the_value(label: str) -> None:
    assert score("3", f"{label} = 3") == 1.0
    assert score(f"{label} = 3", "3") == 1.0
    assert score(f"{label}=3", f"{label} = 3") == 1.0
    assert score("4", f"{label} = 3") == 0.0


NOT_LABELS = ["2x", "x + y", "x^2", "3x - 1", r"\sqrt{x}", "xy + 1"]


@pytest.mark.parametrize("side", NOT_LABELS)
def test_an_expression_is_not_a_label(side: str) -> None:
    assert score(f"{side} = 6", "6") == 0.0  # 2x = 6 says x = 3
    assert score("6", f"{side} = 6") == 0.0


def test_set_membership_is_a_label() -> None:
    assert score(r"x \in [-2, 7]", "[-2, 7]") == 1.0
    assert score("(1, 2)", r"x \in (1, 2)") == 1.0
    assert score(r"x \in [-2, 7]", "[-2, 7)") == 0.0
    assert score(r"x \in [x, 7]", "[x, 7]") == 0.0


# Rule "two answers that name different quantities differ" (equal._labels_match): both
# sides labelled, with labels that name different things -> 0, whatever the values; one
# side labelled -> the values decide. Every kind of label, leading and trailing.
DIFFERENT_LABELS = [
    ("y", "x"), ("a", "x"), ("n", "m"), (r"\theta", "x"), (r"\alpha", r"\beta"), ("x_1", "x_2"),
    ("x_1", "x"), ("V_{1}", "V_2"), ("a_n", "a_m"), ("f(2)", "g(2)"), ("f(2)", "f(3)"), ("f(x)", "g(x)"),
    ("P(A)", "P(B)"), ("(y, x)", "(x, y)"), ("AB", "CD"), ("AB", "AC"), ("|AB|", "|CD|"),
    (r"\overline{AB}", r"\overline{BC}"), (r"\angle ABC", r"\angle BAC"), (r"\frac{NO}{BO}", r"\frac{BO}{NO}"),
    ("A:B", "B:A"), ("X", "x"),
]


def _value_for(label: str) -> str:
    return "(1, 2)" if label.startswith("(") else "3"


@pytest.mark.parametrize(("cand_label", "gold_label"), DIFFERENT_LABELS)
def test_different_labels_differ(cand_label: str, gold_label: str) -> None:
    v = _value_for(gold_label)
    assert score(f"{cand_label} = {v}", f"{gold_label} = {v}") == 0.0
    assert score(f"{gold_label} = {v}", f"{cand_label} = {v}") == 0.0
    assert score(f"{v} = {cand_label}", f"{gold_label} = {v}") == 0.0  # a trailing label too
    assert score(f"{gold_label} = {v}", f"{gold_label}={v}") == 1.0  # the same label
    assert score(f"{cand_label} = {v}", v) == 1.0  # one side labelled: the value decides
    assert score(v, f"{gold_label} = {v}") == 1.0


SAME_LABEL_SPELLINGS = [
    ("x_{1}", "x_1"), ("V_1", "V_{1}"), ("(x,y)", "(x, y)"), ("AB", "BA"), ("|AB|", "AB"),
    (r"\overline{AB}", "AB"), (r"\overline{AB}", "|BA|"), (r"\angle ABC", r"\angle CBA"), ("f(x)", "f( x )"),
    (r"m\angle ABC", r"\angle CBA"),
]


@pytest.mark.parametrize(("a", "b"), SAME_LABEL_SPELLINGS)
def test_one_label_spelled_two_ways(a: str, b: str) -> None:
    v = _value_for(a)
    assert score(f"{a} = {v}", f"{b} = {v}") == 1.0
    assert score(f"{b} = {v}", f"{a} = {v}") == 1.0


MEMBERSHIPS = [r"(-\infty, 2]", r"[0, \infty)", r"(-\infty, -2) \cup (2, \infty)", r"(-\infty, \infty)", r"[1, 2]"]


@pytest.mark.parametrize("interval", MEMBERSHIPS)
def test_membership_label_before_infinity(interval: str) -> None:
    # "\in" is a word: the "\in" that starts "\infty" is no second relation
    assert score(rf"x \in {interval}", interval) == 1.0
    assert score(interval, rf"x \in {interval}") == 1.0
    assert score(rf"t \in {interval}", rf"x \in {interval}") == 0.0  # another variable


@pytest.mark.parametrize("gold", [r"y \le 2", r"y \leq 2", r"2 \ge y", r"y < 2"])
def test_inequality_variable_is_a_label(gold: str) -> None:
    interval = r"(-\infty, 2]" if "<" not in gold else r"(-\infty, 2)"
    assert score(rf"x \in {interval}", gold) == 0.0
    assert score(rf"y \in {interval}", gold) == 1.0
    assert score(interval, gold) == 1.0


RELATIONS = ["=", r"\neq", r"\ne", "<", ">", r"\le", r"\leq", r"\leqslant", r"\ge", r"\geq", "<=", ">="]
MIRROR = {
    "=": "=", r"\neq": r"\neq", r"\ne": r"\neq", "<": ">", ">": "<", r"\le": r"\ge", r"\leq": r"\geq",
    r"\leqslant": r"\geq", r"\ge": r"\le", r"\geq": r"\le", "<=": r"\ge", ">=": r"\le",
}
SIDES = [("25", "x^2 + y^2"), ("0", "x - 1"), (r"\frac{1}{2}", r"\sin x"), ("2y", "3x + 1")]


@pytest.mark.parametrize("op", RELATIONS)
@pytest.mark.parametrize(("left", "right"), SIDES)
def test_relations_read_in_either_direction(op: str, left: str, right: str) -> None:
    assert score(f"{left} {op} {right}", f"{right} {MIRROR[op]} {left}") == 1.0
    assert score(f"{right} {MIRROR[op]} {left}", f"{left} {op} {right}") == 1.0
    if MIRROR[op] not in ("=", r"\neq"):
        assert score(f"{left} {op} {right}", f"{right} {op} {left}") == 0.0


# a relation times a nonzero constant is the same relation (an inequality flips for k < 0)
PROPORTIONAL = [
    ("-34x-45y+20z-100=0", "34x+45y-20z+100=0", 1.0),
    (r"y=-\frac{1}{2}x+\frac{3}{4}", "2x+4y-3=0", 1.0),
    ("2x+4y-3=0", r"y=-\frac{1}{2}x+\frac{3}{4}", 1.0),
    ("x^2/16 + y^2/12 = 1/4", "x^2/4 + y^2/3 = 1", 1.0),
    (r"2x \neq 4y", r"x \neq 2y", 1.0),
    ("-x - y > -1", "x + y < 1", 1.0),
    ("-x - y >= -1", "x + y <= 1", 1.0),
    (r"2x + 2y \le 2", r"x + y \le 1", 1.0),
    (r"-2x - 2y \ge -2", r"1 \ge x + y", 1.0),
    ("-x - y < -1", "x + y < 1", 0.0),  # flipped without flipping the sign
    ("2x + 2y < 2", "x + y > 1", 0.0),
    ("2x + y = 2", "2x + y = 1", 0.0),
    ("x^2 + y = 4", "x + y = 2", 0.0),  # not a constant multiple
    ("0x + 0y = 0", "x + y = 1", 0.0),
    # a relation that states a value (a name, then a constant) is a solution: a restated
    # question scaled to look like it is not the answer
    ("4x + 3 = 7", "x = 1", 0.0),
    ("2x + 1 = 3", "x=1", 0.0),
    ("x - 1 = 0", "x = 1", 0.0),
    ("2a = 6", "a = 3", 0.0),
    ("3 - x > 2", "x < 1", 0.0),
    ("-x > -1", "x < 1", 0.0),
    (r"2x - 2 \le 0", r"x \le 1", 0.0),
    (r"2x \neq 4", r"x \neq 2", 0.0),
    ("3x = 3, 2y = 6", "x = 1, y = 3", 0.0),
    ("x = 1", "4x + 3 = 7", 0.0),
]


@pytest.mark.parametrize(("cand", "gold", "expected"), PROPORTIONAL)
def test_relations_up_to_a_constant_factor(cand: str, gold: str, expected: float) -> None:
    assert score(cand, gold) == expected


# a one-variable inequality is the interval it describes
INTERVALS = [
    ("-793 < a < 10", "(-793, 10)"),
    (r"1 \le x \le 2", "[1, 2]"),
    (r"1 < x \le 2", "(1, 2]"),
    (r"1 \le x < 2", "[1, 2)"),
    ("0 < f(x) < 1", "(0, 1)"),
    ("x > 3", r"(3, \infty)"),
    (r"x \ge 3", r"[3, \infty)"),
    ("x < 3", r"(-\infty, 3)"),
    (r"x \le 3", r"(-\infty, 3]"),
    ("3 > x", r"(-\infty, 3)"),
    ("2 > x > 1", "(1, 2)"),
]


@pytest.mark.parametrize(("inequality", "interval"), INTERVALS)
def test_an_inequality_is_its_interval(inequality: str, interval: str) -> None:
    assert score(interval, inequality) == 1.0  # a gold inequality takes its interval
    point = interval.startswith("(") and interval.endswith(")") and r"\infty" not in interval
    # a gold interval takes the inequality unless it could be a point
    assert score(inequality, interval) == (0.0 if point else 1.0)
    assert score(inequality.replace("3", "4").replace("1", "5"), interval) == 0.0


# ----------------------------------------------- TeX spellings that render identically

SAME_RENDERING = [
    (r"+\infty", r"\infty"),
    (r"(-\infty, +\infty)", r"(-\infty, \infty)"),
    (r"[0, +\infty)", r"[0, \infty)"),
    (r"\frac12", r"\frac{1}{2}"),
    (r"\sqrt2", r"\sqrt{2}"),
    (r"\frac{\sqrt3}2", r"\frac{\sqrt{3}}{2}"),
    ("x^{2}", "x^2"),
    (r"e^{x} + \infty", r"e^x + \infty"),
    (r"\sin(x)", r"\sin x"),
    (r"\sin{x}", r"\sin x"),
    (r"2\cos(\theta)", r"2\cos\theta"),
    (r"\ln(x) + \infty", r"\ln x + \infty"),
    (r"\sin(x^{2})", r"\sin(x^2)"),
    (r"\sin^2(x)", r"\sin^2 x"),
    (r"\sin^{2}x", r"\sin^2 x"),
    (r"\{x : x > 0\}", r"\{x \mid x > 0\}"),  # set-builder "such that", either sign
    (r"2 \cdot 3", r"2 \times 3"),
    (r"2 \cdot \sin x", r"2\sin x"),
    (r"2 \times \sin x", r"2\sin x"),
    (r"3 \cdot \pi", r"3\pi"),
    (r"2 \cdot x", "2x"),
    (r"\lbrace 1, 2 \rbrace", r"\{1, 2\}"),
    (r"\left\lbrace 1, 2 \right\rbrace", r"\{1, 2\}"),
    (r"\lbrack 0, 1 \rbrack", "[0, 1]"),
    (r"\{x \mid x > 0\}", r"\{x | x > 0\}"),
    (r"\{x \vert x > 0\}", r"\{x | x > 0\}"),
    (r"1 \over 2", r"\frac{1}{2}"),
    (r"{x+1 \over 2}", r"\frac{x+1}{2}"),
    (r"1 + {1 \over 2}", r"\frac{3}{2}"),
    (r"\textstyle \frac{1}{2}", r"\frac{1}{2}"),
    (r"\displaystyle \frac{1}{2}", r"\frac{1}{2}"),
    (r"\scriptstyle \frac{1}{2}", r"\frac{1}{2}"),
    (r"\scriptscriptstyle \frac{1}{2}", r"\frac{1}{2}"),
    (r"12\text{\%}", r"12\%"),
    (r"12 \%", r"12\%"),
    (r"12\text{ percent}", r"12\%"),
    ("45\\text{\u00b0}", "45"),
    (r"45\text{ }^\circ", r"45^\circ"),
    ("45\u00b0", r"45^{\circ}"),
    (r"11,\!111", "11111"),
    (r"11{,}111", "11111"),
    (r"11\,111", "11111"),
    ("11 111", "11111"),
    (r"1,\!000,\!000", "1000000"),
    (r"\dfrac{1}{2}", r"\frac{1}{2}"),
    (r"\tfrac{1}{2}", r"\frac{1}{2}"),
    (r"\cfrac{1}{2}", r"\frac{1}{2}"),
    (r"\dfrac{x}{2} + \infty", r"\frac{x}{2} + \infty"),
    ("{1, 3}", "1, 3"),
    ("x <= 1", r"x \le 1"),
    (r"x \leqslant 1", r"x \leq 1"),
    # round 4: text groups of blanks or a sign, upright constants, operator names, arrays
    (r"\text{ }5", "5"),
    (r"\mbox{ } 5 \textrm{ }", "5"),
    (r"\text{-}5", "-5"),
    (r"\textbf{-}\frac{1}{2}", "-0.5"),
    (r"\text{ - }5", "-5"),
    (r"\text{\$}5", r"\$5"),
    (r"\mathrm{e}^{2}", "e^2"),
    (r"\mathrm{e}^{i\pi} + \infty", r"e^{i\pi} + \infty"),
    (r"3+4\mathrm{i}", "3+4i"),
    (r"\operatorname{e}^x", "e^x"),
    (r"\operatorname{sin}x", r"\sin x"),
    (r"\operatorname{arcsin}(x)", r"\arcsin x"),
    (r"\mathrm{ln}\,x", r"\ln x"),
    (r"\operatorname{gcd}(a, b)", r"\gcd(a,b)"),
    (r"\operatorname{max}(a, b)", r"\max(a, b)"),
    (r"\left(\begin{array}{cc} 1 & 2 \\ 3 & 4 \end{array}\right)", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"(\begin{array}{c} \frac12 \\ 0 \end{array})", r"\begin{pmatrix} 0.5 \\ 0 \end{pmatrix}"),
    (r"\left[\begin{array}{rl} 1 & 2 \end{array}\right]", r"\begin{bmatrix} 1 & 2 \end{bmatrix}"),
]


@pytest.mark.parametrize(("a", "b"), SAME_RENDERING)
def test_same_rendering_as_candidate_and_as_gold(a: str, b: str) -> None:
    assert score(a, b) == 1.0
    assert score(b, a) == 1.0


# Every control word that typesets a delimiter character is that character (normalise.py's
# _DELIMITER_WORDS, the one table of them), in an answer that has the character.
DELIMITER_ANSWERS = {
    "\\{": r"\{1, 2\}", "\\}": r"\{1, 2\}", "[": "[0, 1)", "]": "(0, 1]", "(": "(0, 1]", ")": "[0, 1)",
    "|": r"\{x | x > 1\}",
}


@pytest.mark.parametrize("word", sorted(_DELIMITER_WORDS))
def test_every_delimiter_word_is_its_character(word: str) -> None:
    plain = DELIMITER_ANSWERS[_DELIMITER_WORDS[word]]
    spelled = plain.replace(_DELIMITER_WORDS[word], f"\\{word} ", 1)
    assert score(spelled, plain) == 1.0
    assert score(plain, spelled) == 1.0
    assert score(spelled.replace("1", "2"), plain) == 0.0


# the same kinds of spelling with a real difference: still 0
RENDER_DIFFERENTLY = [
    (r"-\infty", r"\infty"),
    (r"\frac123", r"\frac{12}{3}"),
    (r"2 \cdot 3", "23"),
    (r"\sin(2x)", r"\sin 2"),
    (r"\mathbf{a}\times\mathbf{b}", r"\mathbf{a}\cdot\mathbf{b}"),  # a cross product
    (r"\lbrack 0, 1 \rbrack", "(0, 1)"),
    (r"2 \over 1", r"\frac{1}{2}"),
    (r"11,\!11", "1111"),
    ("1 00", "100"),
    (r"12\text{\%}", "0.12"),
    (r"\text{-}5", "5"),
    (r"\mathrm{e}^2", "e^3"),
    (r"\operatorname{sin}x", r"\cos x"),
    (r"\left(\begin{array}{cc} 1 & 2 \\ 3 & 4 \end{array}\right)", r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}"),
    (r"\left(\begin{array}{c|c} 1 & 2 \\ 3 & 4 \end{array}\right)", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\left(\begin{array}{cc} 1 & 2 \\ 3 & 4 \end{array}\right]", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\left(\begin{array}{cc} 1 & 2 \\ 3 & 5 \end{array}\right)", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
]


@pytest.mark.parametrize(
    ("cand", "gold"), [(r"5\,\mathrm{min}", r"5\text{ minutes}"), (r"30\mathrm{deg}", r"30^\circ")]
)
def test_upright_unit_words_stay_units(cand: str, gold: str) -> None:
    # \mathrm{min} and \mathrm{deg} after a number are minutes and degrees, not \min, \deg
    assert score(cand, gold) == 1.0
    assert score(cand, "5" if "min" in cand else "30") == 1.0
    assert score(cand, r"5\text{ hours}" if "min" in cand else r"\frac{\pi}{6}") == 0.0


@pytest.mark.parametrize(("a", "b"), RENDER_DIFFERENTLY)
def test_different_rendering_stays_different(a: str, b: str) -> None:
    assert score(a, b) == 0.0
    assert score(b, a) == 0.0


@pytest.mark.parametrize(
    ("cand", "gold"),
    [("+-3", "-3"), ("+ - 3", "-3"), (r"+\infty", r"-\infty"), (r"\frac{\pi}{6}^\circ", r"\frac{\pi}{6}"), ("x^1 0", "x^{10}")],
)
def test_candidate_spellings_that_stay_different(cand: str, gold: str) -> None:
    assert score(cand, gold) == 0.0


# ------------------------------------------- lists and sets, in any order and in words

SOLUTION_SETS = [
    ("(7,11), (11,7)", "(11,7), (7,11)"),
    ("(7, 11), (11, 7)", "(11,7),(7,11)"),
    (r"(7,11),\ (11,7)", "(11,7)or(7,11)"),
    (r"(7,11) \text{ and } (11,7)", "(11,7), (7,11)"),
    (r"(7,11) \text{ or } (11,7)", "(11,7), (7,11)"),
    (r"\{(7,11), (11,7)\}", "(11,7), (7,11)"),
    ("x = 1, x = 2", "x=2, x=1"),
    (r"x = 1 \text{ or } x = 2", "1, 2"),
    (r"x = 1 \text{ or } x = 2", "x = 2, x = 1"),
    (r"1 \text{ or } 2", "2, 1"),
    ("1 or 2", r"\{1, 2\}"),
    (r"x = -1 \text{ and } x = 2", "-1, 2"),
    (r"-1, 2, \text{ and } 3", "3, 2, -1"),
    (r"-1 \quad\text{and}\quad 2", "-1, 2"),
    ("-1; 2", "-1, 2"),
    (r"-1 \qquad 2", "-1, 2"),
    (r"-1 \quad 2", "2, -1"),
    (r"-1 \text{, } 2", "-1, 2"),
    (r"\{1, 2\}", "1, 2"),
    ("6,8", r"6 \text{ and } 8"),
    (r"p=-1,p=\frac{15}{8}", r"p = -1 \text{ and } p = \dfrac{15}{8}"),
    (r"\{-12, -11, -10\}", "-12;-11;-10"),
    ("(4, 0, 6), (0, 0, 0)", "(0;0;0),(4;0;6)"),
    ("12 $ and $13", r"12\text{ and }13"),
    (r"(x, y) = (5, 8) \quad \text{and} \quad (8, 5)", "(5, 8), (8, 5)"),
    ("y = 2, x = 1", "x = 1, y = 2"),
]


@pytest.mark.parametrize(("cand", "gold"), SOLUTION_SETS)
def test_solution_sets_in_any_order_and_in_words(cand: str, gold: str) -> None:
    assert score(cand, gold) == 1.0


NOT_THE_SET = [
    ("(11, 7)", "(7, 11)"),  # a single tuple stays ordered
    ("(7, 11)", "(11,7), (7,11)"),
    ("(7,11), (11,7), (7,11)", "(11,7), (7,11)"),
    ("1, 2, 3", "1, 2"),
    (r"1 \text{ or } 2 \text{ or } 3", "1, 2"),
    ("1 or 2", "1, 3"),
    ("x = 2, y = 1", "x = 1, y = 2"),  # labels that differ are part of the answer
    ("1, 2", "x = 1, y = 2"),
    ("AB=4,CD=5", "4, 5"),
    (r"(1, 2) \text{ or } (2, 1)", "(1, 2)"),
    (r"\pm 1 \text{ or } 2", "1, -1, 2"),
]


@pytest.mark.parametrize(("cand", "gold"), NOT_THE_SET)
def test_lists_that_are_not_the_set(cand: str, gold: str) -> None:
    assert score(cand, gold) == 0.0


# Rule "a comma before three digits is no list joint when the item would be zero-padded":
# "1,000" is one thousand (a list of 1 and 000 nobody writes), in every bracket.
THOUSANDS_NOT_LISTS = [
    ("1,000", "1, 0"), ("(1,000)", "(1, 0)"), ("[1,000]", "[1, 0]"), (r"\{1,000\}", r"\{1, 0\}"),
    ("(1,000, 2)", "(1, 0, 2)"), ("(2, 1,000)", "(2, 1, 0)"), ("1,000,000", "1, 0, 0"), ("(1, 05)", "(1, 5)"),
    ("-1,000", "-1, 0"),
]


@pytest.mark.parametrize(("cand", "gold"), THOUSANDS_NOT_LISTS)
def test_thousands_are_not_a_list_with_a_zero_padded_item(cand: str, gold: str) -> None:
    assert score(cand, gold) == 0.0
    assert score(gold, cand) == 0.0
    assert score(cand, cand) == 1.0


@pytest.mark.parametrize(
    ("cand", "gold"), [("1,000", "1000"), ("1,000,000", "1000000"), ("(0, 0)", "(0,0)"), ("(0.5, 0)", r"(\frac12, 0)")]
)
def test_thousands_and_zero_items_still_read(cand: str, gold: str) -> None:
    assert score(cand, gold) == 1.0


# every way of listing several values is still a hedge for a single-valued gold
LISTINGS = [
    "1, 2", "2, 1", "1 or 2", "1 and 2", r"1 \text{ or } 2", r"1 \text{ and } 2", r"1 \quad\text{or}\quad 2",
    r"x = 1 \text{ or } x = 2", "x = 1, x = 2", "1; 2", r"1 \qquad 2", r"1 \quad 2", r"1 \text{, } 2",
    r"\{1, 2\}", r"1 \lor 2", r"1 \vee 2", r"\pm 1", "1 $ or $ 2", "{1, 2}",
]


@pytest.mark.parametrize("listing", LISTINGS)
@pytest.mark.parametrize("gold", ["1", "2", "x = 1", r"\frac{2}{1}", r"1\text{ cm}"])
def test_hedging_guard_holds_for_every_listing(listing: str, gold: str) -> None:
    assert score(listing, gold) == 0.0


@pytest.mark.parametrize("gold", ["1", "x = 1", r"1\text{ cm}"])
def test_several_boxes_are_still_a_hedge(gold: str) -> None:
    assert boxed_math(r"\boxed{1} or \boxed{2}", gold) == 0.0
    assert boxed_math(r"\boxed{x = 2} so \boxed{x = 1}", gold) == 0.0
    assert boxed_math(r"\boxed{1\text{ m}} so \boxed{1\text{ cm}}", r"1\text{ cm}") == 0.0


# ------------------------------------------------------- the new rules stay bounded

SLOW_SHAPES = [
    "{" * 5000 + "}" * 5000,
    r"{1 \over 2 \over 3}" * 300,
    "x = " * 2000 + "1",
    "AB=" * 2000,
    "(x," * 3000 + "y) = 1",
    r"\in " * 3000,
    "1" * 100_000 + " cm",
    r"\text{cm}" * 600,
    r"^\circ" * 1000,
    "12 km/h/h/h" * 300,
    ", ".join(["1 or 2"] * 300),
    r"1 \quad 2 \quad " * 400,
    " 000" * 3000,
    ";" * 5000,
    "a < x < b, " * 500,
    "5 " + "aa  " * 1000 + "1",
    r"\text{ }" * 1000,
    r"\text{-}" * 1000,
    r"\mathrm{e}" * 1000,
    r"\operatorname{sin}" * 1000,
    r"(\begin{array}{c}" * 500 + "1" + r"\end{array})" * 500,
    r"x \in " + r"\infty" * 2000,
    "x = " * 1000 + r"y \le 2",
    "1,000, " * 1000,
]


def test_bare_unit_pattern_is_linear() -> None:
    # whitespace is collapsed before this pattern runs, but the pattern itself must not
    # depend on that: two readings of each space made "5 aa  aa ... 1" exponential
    from rlvr.verifiers.math.normalise import _BARE_UNIT

    # 2.4 s before, each "aa  " x3.5; microseconds now, which bench/time_bounds.py measures
    assert _BARE_UNIT.fullmatch("5 " + "aa  " * 22 + "1") is None


@pytest.mark.parametrize("shape", SLOW_SHAPES, ids=range(len(SLOW_SHAPES)))
def test_new_rules_finish_fast(shape: str) -> None:
    boxed_math.warm_up()  # type: ignore[attr-defined]  # sympy imported before the clock starts
    clear_caches()  # the cold path; its time (under 1 s of CPU) is bench/time_bounds.py's
    boxed_math(box(shape[:499]), shape)
    boxed_math(box("1"), shape)
    boxed_math(box(shape[:499]), "1")
