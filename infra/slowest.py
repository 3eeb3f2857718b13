"""Prints the slowest tests of a run from nextest's JUnit report (the test command writes it:
`.config/nextest.toml`, profile `ci`), slowest first, with their share of the tests' summed time:

    python3 infra/slowest.py target/nextest/ci/junit.xml [N]

N defaults to 10. A missing or empty report prints a line saying so and exits 0: the listing
informs, it never fails a run.
"""

import sys
import xml.etree.ElementTree as ET


def slowest(path, n=10):
    """[(seconds, test name)] of the `n` slowest test cases in the JUnit file at `path`."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            continue
        name = case.get("name", "?")
        cls = case.get("classname", "")
        cases.append((seconds, f"{cls} {name}".strip()))
    cases.sort(key=lambda c: (-c[0], c[1]))
    return cases[:n], sum(c[0] for c in cases), len(cases)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "target/nextest/ci/junit.xml"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    try:
        top, total, count = slowest(path, n)
    except (OSError, ET.ParseError) as e:
        print(f"no test report to list the slowest tests from ({path}: {e})")
        return
    if not top:
        print(f"no test cases in {path}")
        return
    print(f"the {len(top)} slowest of {count} tests ({total:.0f} s summed over all):")
    for seconds, name in top:
        print(f"{seconds:8.1f}s  {100 * seconds / total if total else 0:4.1f}%  {name}")


if __name__ == "__main__":
    main()
