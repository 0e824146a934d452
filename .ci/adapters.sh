#!/usr/bin/env bash
# CI: the adapter tests against peer packages whose pins conflict with ours, each in its own environment:
# shinka-evolve 0.0.7 pins httpx==0.27 and (through moviepy) pillow<12, against the test extra's httpx 0.28.1 and
# pillow 13.0.0. reasearch is installed non-editable there, with the peer pinned; tests/adapters/ runs under it.
# (openevolve 0.4.0 and gepa 0.1.4 conflict with nothing: they are in the test extra and run in the main suite.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
venv=/tmp/reasearch-ci-shinka
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q '.[shinka]' 'pytest>=8' 'pytest-timeout>=2.3'
# Run from a copy of the tests outside the checkout, so `reasearch` is the installed package, not ./reasearch.
work="$(mktemp -d)"
cp -r tests "$work/tests"
cd "$work"
REASEARCH_ADAPTER_PEER=shinka "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/adapters/test_shinka.py tests/adapters/test_rank.py
