# Two commands for a fresh machine (see README): `make demo` and `make test`.
.PHONY: setup demo test lint bench k8s-binaries

setup:
	WITH_K8S=1 scripts/setup.sh

demo:
	scripts/demo.sh

test:
	scripts/test.sh

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy .
	for pack in tests/variant_packs/*/*/pack.py; do .venv/bin/mypy "$$pack" || exit 1; done

k8s-binaries:
	WITH_K8S=1 scripts/setup.sh

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; .venv/bin/python $$b; done
