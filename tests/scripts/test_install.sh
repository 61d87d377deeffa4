#!/bin/sh
# `cmake --install` into a staging directory (DESTDIR) puts exactly the binary, the manual pages,
# the schemas, the bash completion and the examples in place, and the installed binary and pages
# work from there.
set -u
build=$(dirname "$XMPRUN_BIN")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

DESTDIR=$stage cmake --install "$build" --prefix /usr >"$stage.log" 2>&1 || {
    cat "$stage.log"; rm -f "$stage.log"; echo "FAIL: cmake --install"; exit 1; }
rm -f "$stage.log"
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
# Slurm's plugin, built where Slurm's development header is (scripts/install-deps.sh installs it).
spank=
[ ! -f "$build/spank_xmprun.so" ] && [ ! -f "$build/slurm/spank_xmprun.so" ] ||
    spank="usr/$libdir/xmprun/spank_xmprun.so"
want=$(LC_ALL=C sort <<EOF | sed '/^$/d'
$spank
usr/bin/xmprun
usr/include/xmprun.h
usr/$libdir/libxmprun.so
usr/$libdir/pkgconfig/xmprun.pc
usr/lib/python3/dist-packages/xmprun/__init__.py
usr/share/bash-completion/completions/xmprun
usr/share/doc/xmprun/examples/failfast.yaml
usr/share/doc/xmprun/examples/flaky.yaml
usr/share/doc/xmprun/examples/oom.yaml
usr/share/doc/xmprun/examples/quickstart.yaml
usr/share/man/man1/xmprun.1
usr/share/man/man5/xmprun.yaml.5
usr/share/xmprun/schemas/job.schema.json
usr/share/xmprun/schemas/report.schema.json
EOF
)
got=$(cd "$stage" && find . -type f -o -type l | sed 's|^\./||' | LC_ALL=C sort)
[ "$got" = "$want" ] || fail "installed tree differs:
--- want
$want
--- got
$got"
[ -x "$stage/usr/bin/xmprun" ] || fail "usr/bin/xmprun is not executable"
"$stage/usr/bin/xmprun" --version | grep -q '^xmprun [0-9]' || fail "installed xmprun --version"
"$stage/usr/bin/xmprun" validate "$stage/usr/share/doc/xmprun/examples/quickstart.yaml" >/dev/null ||
    fail "the installed quickstart example does not validate"
# man finds the pages by name below the staged manual tree.
for page in "1 xmprun" "5 xmprun.yaml"; do
    # shellcheck disable=SC2086
    out=$(MANWIDTH=100 man -M "$stage/usr/share/man" $page 2>&1) || fail "man $page: $out"
    echo "$out" | grep -q '^NAME' || fail "man $page has no NAME section"
done
cmp -s "$stage/usr/share/xmprun/schemas/job.schema.json" "$XMPRUN_SOURCE_DIR/schemas/job.schema.json" ||
    fail "installed job.schema.json differs from schemas/"
bash -c ". '$stage/usr/share/bash-completion/completions/xmprun' && complete -p xmprun" \
    >/dev/null 2>&1 || fail "the installed completion does not load in bash"
[ $status = 0 ] && echo "install: $(echo "$got" | wc -l) files in place"
exit $status
