"""The one short form every cluster and login line is cut with (reports/text.py short): at a word boundary, with an
ASCII '...', on one line."""

from dl_doctor.reports.text import short


def test_short_text_cuts_between_words_with_ascii_dots():
    text = "The fabric manager is not running at the driver's version"
    assert short(text, 200) == text
    assert short(text, len(text)) == text
    assert short(text, 30) == "The fabric manager is not..."          # not "The fabric manager is not ru..."
    assert short(text, 31) == "The fabric manager is not..."
    assert short(text, 32) == "The fabric manager is not..."
    assert short(text, 29) == "The fabric manager is not..."          # the word fits exactly before the dots
    assert all(len(short(text, n)) <= n for n in range(1, 80))
    assert "\u2026" not in "".join(short(text, n) for n in range(1, 80))


def test_short_text_drops_dangling_punctuation_and_joins_lines():
    assert short("GPU 3 failed, and then   the\nnode rebooted", 18) == "GPU 3 failed..."
    assert short("one\ttwo\nthree", 40) == "one two three"


def test_a_word_longer_than_the_room_is_the_only_one_cut():
    assert short("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 is missing", 20) == "/usr/lib/x86_64-l..."
    assert short("abcdef", 3) == "abc"
