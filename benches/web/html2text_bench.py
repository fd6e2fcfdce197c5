"""Times Python converters on the same HTML file: html2text and markdownify.
Usage: python html2text_bench.py <file.html> <runs>
Prints one JSON line: {"html2text_ms": .., "markdownify_ms": ..} (medians)."""
import json
import sys
import time

import html2text
from markdownify import markdownify

html = open(sys.argv[1], encoding="utf-8").read()
runs = int(sys.argv[2])


def median_ms(convert):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        convert(html)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return samples[len(samples) // 2]


print(json.dumps({
    "html2text_ms": median_ms(lambda h: html2text.html2text(h)),
    "markdownify_ms": median_ms(lambda h: markdownify(h)),
}))
