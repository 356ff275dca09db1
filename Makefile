# Short load run against an in-process jobapi on the local Postgres and Redis (a minute or
# two); `make bench-full` runs the full sizes (1M-build scale points: several minutes).
# Extra flags: make bench BENCH_FLAGS='--profile-dir /tmp/jobapi-prof'
BENCH_FLAGS ?=

.PHONY: test bench bench-full

test:
	go test -race -count=1 ./...

bench:
	go run ./cmd/jobapi-bench --short $(BENCH_FLAGS)

bench-full:
	go run ./cmd/jobapi-bench $(BENCH_FLAGS)
