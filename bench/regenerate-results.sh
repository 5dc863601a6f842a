#!/usr/bin/env bash
# Regenerates bench/results/ from one commit.
#
#   bench/regenerate-results.sh [--commit REV] [--out DIR] [--quick] [--shared DIR] [SCENARIO...]
#   bench/regenerate-results.sh --list
#
# It checks the commit out into a temporary git worktree (so neither a dirty
# working tree nor someone's edits in progress reach the figures), builds the
# binaries there, runs each scenario (default: all, in the order --list
# prints) and writes bench/results/<scenario>.txt into the checkout the script
# was called from. Every file starts with a header: the commit (full sha), the
# date, the machine (nproc, CPU model, go version), the load average, and the
# command that produced it; then each underlying command ("$ ...", run from
# the commit's tree; BIN is the folder of the binaries built from it)
# followed by its output. A failed scenario is reported, its output kept in
# the work folder (the results file of an earlier run is left as it was), and
# the script exits non-zero after the other scenarios have run.
#
# Options:
#   --commit REV  the commit to measure (default HEAD of this checkout)
#   --out DIR     where the results go (default: bench/results of this
#                 checkout; with --quick: WORK/quick-results)
#   --quick       short durations and small clusters: checks that every
#                 scenario runs; the figures are not the README's
#   --shared DIR  the folder holding gatekeeper-library/ (default: the
#                 shared/ folder beside this checkout, ../shared from its
#                 root); the worktree gets a symbolic link to it at the same
#                 place, ../shared, where the benches look for the library
#   --list        print the scenarios, one a line: name and what it measures
#
# Environment: BENCH_WORK is the work folder WORK (default
# ${TMPDIR:-/tmp}/opa-scheduler-extender-bench): the worktree (WORK/main,
# always the same path, so the Go build cache stays valid from run to run),
# the binaries (WORK/bin), the e2e control-plane binaries (WORK/e2e-bin), the
# output of failed scenarios (WORK/failed). Needs git, go, flock, and for the
# e2e scenarios what bench/e2e/ci.sh needs (the first build of kube-apiserver
# and kube-scheduler from modules takes 6 to 12 minutes on 2 cores; cached
# after that). A full run takes about 55 minutes on 2 vCPUs shared with other
# work.
set -uo pipefail

# scenario name | what it measures (printed by --list; the order of a full run)
SCENARIOS=(
	"realistic|the realistic mix through the load generator, the service as its own process: filter and a cycle at 500 and 5000 candidates, three runs"
	"realistic-engines|the realistic mix with the library's dual templates on CEL (the default, as in Gatekeeper) and on Rego (--enable-k8s-native-validation=false), alternated, two runs each"
	"realistic-inprocess|the same in the load generator's process, and the floor: the same requests answered without the engine, then after 250 µs of CPU each"
	"churn|the realistic mix under Node churn (20 heartbeats or label flips a second), one kind: List file, a Namespace-reading template; the still cycle at 500 against the floor in a process of its own"
	"mix|issue 5's mix (16 library templates and the 4 examples, 20 constraints), the service as its own process"
	"peer|time per pod against Gatekeeper's constraint framework (mix and realistic), same verdicts; the framework's own microbenchmarks"
	"footprint|memory of the service as a process (folder mode) at 1000, 5000 and 10000 Nodes, and of Gatekeeper's framework holding the same"
	"footprint-cluster|memory of the service syncing 5000 Nodes from a real kube-apiserver, and after every Node's status is updated"
	"engine|microbenchmarks: Engine.Evaluate, the realistic mix's pod stream and /filter handler, a one-off pod's evaluations, the plugin's cycle"
	"throughput|pods bound per second by the stock kube-scheduler: no extender, no-op extender, the service, the plugin build; realistic mix"
	"throughput-examples|the same on the example policies and fake Nodes (the plugin build's and the extender's targets)"
	"throughput-churn|the realistic mix through kube-scheduler under 20 Node status updates a second, names and full Nodes; under 100 a second, names"
	"policy-latency|time from a policy change to the answers that use it: through the folder and through the API server"
	"diff|the differential test against Gatekeeper's framework (library samples and mutated pods): comparisons and differences"
	"generated|generated CEL and Rego templates and pods judged by Gatekeeper's drivers and the engine with and without memo: comparisons, forms, differences"
)

die() { echo "regenerate-results: $*" >&2; exit 2; }

scenario_names() { local s; for s in "${SCENARIOS[@]}"; do echo "${s%%|*}"; done; }

# quote prints a command so that it can be pasted into a shell, with the
# worktree as ".", the binaries' folder as BIN and the work folder as WORK.
quote() {
	local a s=""
	for a in "$@"; do
		a="${a//$WT/.}"
		a="${a//$BIN/BIN}"
		a="${a//$WORK/WORK}"
		if [[ -n "$a" && "$a" =~ ^[A-Za-z0-9_./=:,+@%^-]+$ ]]; then s+="$a "; else s+="'${a//\'/\'\\\'\'}' "; fi
	done
	printf '%s' "${s% }"
}

# run DIR CMD...: runs CMD in the worktree's DIR, appending the command and
# its output to the scenario's file (FILE); a failure marks the scenario
# failed (FAILED) and the scenario goes on with its next command.
run() {
	local dir="$1"; shift
	local where="" t0=$SECONDS rc
	[ "$dir" = . ] || where="cd $dir && "
	printf '\n$ %s%s\n' "$where" "$(quote "$@")" >>"$FILE"
	echo "regenerate-results: $(date -u +%H:%M:%S) $where$(quote "$@")" >&2
	(cd "$WT/$dir" && "$@") >>"$FILE" 2>&1
	rc=$?
	printf '# (exit %d, %ds)\n' "$rc" "$((SECONDS - t0))" >>"$FILE"
	[ $rc = 0 ] || FAILED=1
	return 0
}

# build makes the binaries the loadgen and footprint scenarios run, once per
# run (its log: WORK/build.log), and notes in FILE how they were built.
BUILD_CMD="go build -o BIN/ ./cmd/opa-scheduler-extender; cd bench && go build -o BIN/ ./cmd/loadgen ./cmd/footprint ./cmd/gkfootprint"
BUILT=""
build() {
	if [ -z "$BUILT" ]; then
		BUILT=ok
		echo "regenerate-results: building BIN: $BUILD_CMD" >&2
		{ (cd "$WT" && go build -o "$BIN/" ./cmd/opa-scheduler-extender) &&
			(cd "$WT/bench" && go build -o "$BIN/" ./cmd/loadgen ./cmd/footprint ./cmd/gkfootprint) &&
			printf '#!/bin/sh\nexec "%s/opa-scheduler-extender" "$@" --enable-k8s-native-validation=false\n' "$BIN" >"$BIN/opa-scheduler-extender-rego" &&
			chmod +x "$BIN/opa-scheduler-extender-rego"; } >"$WORK/build.log" 2>&1 || BUILT=failed
	fi
	printf '# BIN: %s (%s)\n' "$BUILD_CMD" "$BUILT" >>"$FILE"
	if [ "$BUILT" != ok ]; then
		cat "$WORK/build.log" >>"$FILE"
		FAILED=1
		return 1
	fi
}

# Every loadgen command runs from bench/ (it finds the library and the
# policies from there).
loadgen_service() { run bench "$BIN/loadgen" "$@" -full-nodes '' -peer=false -footprint=false -service "$SVC"; }

# The e2e tests build the control plane into E2E_BIN_DIR (a relink once the
# build cache is warm), and the service and the plugin build from the commit.
e2e() { run bench/e2e env E2E_BIN_DIR="$E2EBIN" go test -count=1 -timeout 60m -v "$@"; }

scenario_realistic() {
	build || return
	local i
	for i in $(seq "$LG_RUNS"); do
		loadgen_service -policy-set realistic -duration "$LG_DUR" -nodes 500,5000 -verbs filter,cycle -floor -floor-cpu-match
	done
}

# The service on Rego only: BIN/opa-scheduler-extender-rego runs it with
# --enable-k8s-native-validation=false (the load generator passes no flags).
scenario_realistic-engines() {
	build || return
	local i c=(-policy-set realistic -duration "$LG_DUR" -nodes 500,5000 -verbs filter,cycle -full-nodes '' -peer=false -footprint=false)
	for i in 1 2; do
		run bench "$BIN/loadgen" "${c[@]}" -service "$SVC"
		run bench "$BIN/loadgen" "${c[@]}" -service "$BIN/opa-scheduler-extender-rego"
	done
}

scenario_realistic-inprocess() {
	build || return
	run bench "$BIN/loadgen" -policy-set realistic -duration "$LG_DUR" -nodes 500,5000 -full-nodes '' -peer=false -footprint=false -verbs filter,cycle -floor
	# The floor again, spending 250 µs of CPU per request: a server with
	# about the service's mean cycle and no collector, garbage or variance.
	run bench "$BIN/loadgen" -policy-set realistic -duration "$LG_DUR" -nodes 500 -inventory 5000 -full-nodes '' -peer=false -footprint=false -verbs cycle -floor -floor-cpu 250us
}

scenario_churn() {
	build || return
	local c=(-policy-set realistic -duration "$CHURN_DUR" -nodes 500,5000 -verbs cycle)
	loadgen_service "${c[@]}" -node-files 10
	# Still at 500 again, then the floor in a process of its own spending
	# about the service's CPU per cycle: what two processes on this
	# machine take of that cycle with no engine, collector or garbage.
	loadgen_service -policy-set realistic -duration "$CHURN_DUR" -nodes 500 -inventory 5000 -verbs cycle -node-files 10 -floor -floor-cpu 250us
	loadgen_service "${c[@]}" -node-files 10 -churn 20 -churn-kind heartbeat
	loadgen_service "${c[@]}" -node-files 10 -churn 20 -churn-kind labels
	loadgen_service "${c[@]}" -node-files 0
	loadgen_service "${c[@]}" -node-files 10 -extra testdata/inventory-readers
	loadgen_service "${c[@]}" -node-files 10 -extra testdata/inventory-readers -churn 20 -churn-kind heartbeat
	# The memo filled: half the pods one-off (a new class each) for a minute.
	loadgen_service "${c[@]}" -node-files 10 -churn 20 -churn-kind heartbeat -nodes 5000 -one-off 0.5 -duration "$MEMO_DUR"
}

scenario_mix() {
	build || return
	loadgen_service -policy-set mix -duration "$LG_DUR" -nodes 500,5000 -verbs filter,prioritize,cycle
}

scenario_peer() {
	build || return
	run bench "$BIN/loadgen" -policy-set mix -duration 5s -nodes 100,500 -full-nodes '' -footprint=false -verbs filter -peer -peer-nodes 100,500
	run bench "$BIN/loadgen" -policy-set realistic -duration 5s -nodes 500 -full-nodes '' -footprint=false -verbs filter -peer -peer-nodes 500
	run bench go test -count="$BENCH_COUNT" -run '^$' -bench . -benchtime "$PEER_BENCHTIME" ./peer/
}

scenario_footprint() {
	build || return
	local n
	run bench "$BIN/footprint" -policy-set all -nodes 5000 -service "$SVC" -requests "$FP_REQS"
	for n in $FP_NODES; do
		run bench "$BIN/footprint" -policy-set realistic -nodes "$n" -service "$SVC" -requests "$FP_REQS"
	done
	for n in $GK_NODES; do
		run bench "$BIN/gkfootprint" -policy-set realistic -nodes "$n"
	done
}

scenario_footprint-cluster() {
	e2e -run TestClusterFootprint ./footprint/ -args -footprint-nodes "$CFP_NODES" -stale-updates "$CFP_UPDATES"
}

scenario_engine() {
	run . go test -count="$BENCH_COUNT" -run '^$' -bench Evaluate -benchmem ./opa/...
	run bench go test -count="$BENCH_COUNT" -run '^$' -bench 'PodStream|FilterHandler|ReplicaPod' -benchtime "$PERF_BENCHTIME" -benchmem ./perf/
	run bench go test -count=1 -run '^$' -bench OneOffPod -benchtime "$ONEOFF_N" -v ./perf/
	run cmd/opa-kube-scheduler go test -count="$BENCH_COUNT" -run '^$' -bench Cycle -benchmem ./gatekeeper/
}

scenario_throughput() {
	e2e -run TestSchedulerThroughput ./throughput/ -args -policy-set realistic -nodes "$E2E_NODES" -pods "$E2E_PODS" -full-pods 0 \
		-setups 'no extender|plugin|\(names\)' -rounds "$E2E_ROUNDS" -default-qps=true
}

scenario_throughput-examples() {
	e2e -run TestSchedulerThroughput ./throughput/ -args -policy-set examples -nodes "$E2E_NODES" -pods "$E2E_PODS" -full-pods 0 \
		-setups 'no extender|plugin|\(names\)' -rounds "$EX_ROUNDS" -default-qps=false
}

scenario_throughput-churn() {
	e2e -run TestSchedulerThroughput ./throughput/ -args -policy-set realistic -nodes "$E2E_NODES" -pods "$E2E_PODS" -full-pods "$E2E_FULL" \
		-churn 20 -default-qps=false
	e2e -run TestSchedulerThroughput ./throughput/ -args -policy-set realistic -nodes "$E2E_NODES" -pods "$E2E_PODS" -full-pods 0 \
		-setups 'no extender|\(names\)' -rounds "$EX_ROUNDS" -churn 100 -default-qps=false
}

scenario_policy-latency() {
	run . go test -count="$BENCH_COUNT" -run '^$' -bench PolicyChangeLatencyFolder -benchtime "$LAT_N" ./server/
	e2e -run 'TestPolicyChangeLatencyThroughTheAPI|TestPolicyChangesTakeEffectWithoutRestart' ./extender/
}

scenario_diff() {
	run bench go test -count=1 -v $DIFF_SHORT ./diff/
}

scenario_generated() {
	run bench go test -count=1 -timeout 0 -v -run 'TestGeneratedCEL|TestGeneratedRego' ./diff/ -args -gen-rounds "$GEN_ROUNDS"
}

# main runs the scenarios. bash reads a function whole before it runs it,
# so an edit of this file during a run does not change the run.
main() {
	local here checkout commit=HEAD out="" quick=0 shared="" sha s name t0 start
	local selected=() failed=()
	here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
	checkout="$(git -C "$here" rev-parse --show-toplevel 2>/dev/null)" || die "not inside a git checkout: $here"
	while [ $# -gt 0 ]; do
		case "$1" in
		--commit) [ $# -ge 2 ] || die "--commit needs a revision"; commit="$2"; shift 2 ;;
		--commit=*) commit="${1#*=}"; shift ;;
		--out) [ $# -ge 2 ] || die "--out needs a folder"; out="$2"; shift 2 ;;
		--out=*) out="${1#*=}"; shift ;;
		--shared) [ $# -ge 2 ] || die "--shared needs a folder"; shared="$2"; shift 2 ;;
		--shared=*) shared="${1#*=}"; shift ;;
		--quick) quick=1; shift ;;
		--list)
			for s in "${SCENARIOS[@]}"; do printf '%-20s %s\n' "${s%%|*}" "${s#*|}"; done
			exit 0 ;;
		-h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
		-*) die "unknown option $1 (see --help)" ;;
		*) scenario_names | grep -qx -- "$1" || die "unknown scenario $1 (see --list)"; selected+=("$1"); shift ;;
		esac
	done
	[ ${#selected[@]} -gt 0 ] || mapfile -t selected < <(scenario_names)

	sha="$(git -C "$checkout" rev-parse --verify "$commit^{commit}" 2>/dev/null)" || die "no such commit: $commit"
	[ -n "$shared" ] || shared="$(dirname "$checkout")/shared"
	[ -d "$shared/gatekeeper-library/library" ] || die "no gatekeeper-library/library in $shared (pass --shared DIR)"
	shared="$(cd "$shared" && pwd -P)"
	command -v flock >/dev/null || die "flock is needed"

	WORK="${BENCH_WORK:-${TMPDIR:-/tmp}/opa-scheduler-extender-bench}"
	WT="$WORK/main" BIN="$WORK/bin" E2EBIN="$WORK/e2e-bin" SVC="$WORK/bin/opa-scheduler-extender"
	if [ -z "$out" ]; then
		if [ $quick = 1 ]; then out="$WORK/quick-results"; else out="$checkout/bench/results"; fi
	fi
	mkdir -p "$WORK" "$out" "$WORK/failed" || die "cannot create $WORK or $out"
	out="$(cd "$out" && pwd)"
	exec 9>"$WORK/lock"
	flock -n 9 || die "another run holds $WORK/lock"

	# The worktree: always at WORK/main, with ../shared beside it as beside
	# the repository's clone.
	if [ -e "$WT" ]; then
		git -C "$checkout" worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"
		git -C "$checkout" worktree prune
	fi
	git -C "$checkout" worktree add --detach "$WT" "$sha" >/dev/null 2>&1 || die "git worktree add $WT $sha failed"
	CHECKOUT="$checkout"
	trap 'git -C "$CHECKOUT" worktree remove --force "$WT" 2>/dev/null' EXIT
	ln -sfn "$shared" "$WORK/shared"
	rm -rf "$BIN" && mkdir -p "$BIN" "$E2EBIN"

	local gover model machine
	gover="$(cd "$WT" && go version)" || die "go version failed"
	model="$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)"
	machine="$(nproc) CPUs ($model), $(awk '/^MemTotal/ {print int($2/1024/1024+0.5)}' /proc/meminfo) GiB, ${gover#go version }"

	# Durations and sizes; --quick only checks that the scenarios run.
	if [ $quick = 1 ]; then
		LG_DUR=1s LG_RUNS=1 CHURN_DUR=1s MEMO_DUR=2s FP_NODES="1000" FP_REQS=100 GK_NODES="1000"
		E2E_NODES=200 E2E_PODS=300 E2E_FULL=20 E2E_ROUNDS=1 EX_ROUNDS=1 CFP_NODES=500 CFP_UPDATES=1
		BENCH_COUNT=1 PEER_BENCHTIME=1x PERF_BENCHTIME=100x ONEOFF_N=10x LAT_N=3x DIFF_SHORT=-short GEN_ROUNDS=2
	else
		LG_DUR=10s LG_RUNS=3 CHURN_DUR=10s MEMO_DUR=60s FP_NODES="1000 5000 10000" FP_REQS=2000 GK_NODES="1000 5000 10000"
		E2E_NODES=1000 E2E_PODS=2000 E2E_FULL=200 E2E_ROUNDS=3 EX_ROUNDS=5 CFP_NODES=5000 CFP_UPDATES=3
		BENCH_COUNT=3 PEER_BENCHTIME=3s PERF_BENCHTIME=1s ONEOFF_N=100x LAT_N=10x DIFF_SHORT= GEN_ROUNDS=72
	fi

	start=$SECONDS
	echo "regenerate-results: commit $sha, worktree $WT, results in $out" >&2
	for name in "${selected[@]}"; do
		FILE="$WORK/$name.txt.partial" FAILED=0 t0=$SECONDS
		{
			printf '# %s: commit %s, %s, %s; produced by: bench/regenerate-results.sh --commit %s%s %s\n' \
				"$name" "$sha" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$machine" "${sha:0:12}" "$([ $quick = 1 ] && echo ' --quick')" "$name"
			printf '# load average at the start: %s; commands run from the commit'"'"'s tree (.), BIN the binaries built from it, WORK the work folder\n' \
				"$(cut -d' ' -f1-3 /proc/loadavg)"
		} >"$FILE"
		"scenario_$name"
		printf '\n# %s: %s in %ds\n' "$name" "$([ $FAILED = 0 ] && echo done || echo FAILED)" "$((SECONDS - t0))" >>"$FILE"
		if [ $FAILED = 0 ]; then
			mv "$FILE" "$out/$name.txt"
			echo "regenerate-results: $name done in $((SECONDS - t0))s: $out/$name.txt" >&2
		else
			mv "$FILE" "$WORK/failed/$name.txt"
			failed+=("$name")
			echo "regenerate-results: $name FAILED after $((SECONDS - t0))s: see $WORK/failed/$name.txt" >&2
		fi
	done
	echo "regenerate-results: ${#selected[@]} scenarios in $((SECONDS - start))s; failed: ${failed[*]:-none}" >&2
	[ ${#failed[@]} = 0 ]
}

main "$@"
exit
