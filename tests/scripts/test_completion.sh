#!/bin/bash
# The bash completion built into build/completion/xmprun: commands, options, spec keys after
# --set (from the schema, with "=" and no space), report files after `report`.
set -u
comp=$(dirname "$XMPRUN_BIN")/completion/xmprun
[ -s "$comp" ] || { echo "FAIL: $comp was not generated"; exit 1; }
# shellcheck disable=SC1090
. "$comp"
status=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" && touch job.yaml other.yml notes.txt run.report.json

# complete WORDS... : runs _xmprun with the cursor on the last word; prints the candidates.
complete_words() {
    COMP_WORDS=(xmprun "$@")
    COMP_CWORD=$(($# ))
    COMPREPLY=()
    _xmprun
    printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}
expect() {
    local want=$1 got
    shift
    got=$(complete_words "$@")
    if [ "$got" != "$want" ]; then
        echo "FAIL: xmprun $* <TAB>: got '$got', want '$want'"
        status=1
    fi
}
expect "gc job.yaml other.yml plan report stacks validate " ""
expect "plan " pl
expect "--set " --s
expect "--report " --rep
expect "resources.worker.memory= resources.worker.memory_high= " --set resources.worker.mem
expect "on_failure.action= on_failure.grace= on_failure.hang_timeout= on_failure.restarts= on_failure.stacks= " -q --set on_fail
expect "run.report.json " report ""
expect "job.yaml other.yml " validate job.yaml ""
expect "--workers " plan --wor
# Every leaf of the schema is offered after --set.
keys=$(complete_words --set "")
for k in $(/usr/bin/python3 "$XMPRUN_SOURCE_DIR/scripts/schema_fields.py" --leaves \
        "$XMPRUN_SOURCE_DIR/schemas/job.schema.json"); do
    case " $keys " in *" $k= "*) ;; *) echo "FAIL: --set does not offer $k"; status=1 ;; esac
done
[ $status = 0 ] && echo "completion: ok ($(echo "$keys" | wc -w) spec keys)"
exit $status
