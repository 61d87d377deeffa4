# Sourced by the tests that run jobs as the regular user who submits them: regular_user FILE...
# makes the user xmprun-e2e (no home; skip() when it cannot be made), sets uid and gid, and lets
# others search every directory above each FILE (o+x, nothing more), as a user's install would.
regular_user() {
    local f d
    user=xmprun-e2e
    id -u $user >/dev/null 2>&1 || useradd -M -U $user || skip "cannot create the user $user"
    uid=$(id -u $user) gid=$(id -g $user)
    for f in "$@"; do
        d=$(dirname "$f")
        while [ "$d" != / ]; do
            [ -n "$(find "$d" -maxdepth 0 -perm -o+x)" ] || chmod o+x "$d"
            d=$(dirname "$d")
        done
    done
}
