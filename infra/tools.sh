# Sourced by infra/check-template.sh: the template tools at the versions these checks were written
# against, reused where they already are and installed (each in its own virtualenv: aws-sam-cli
# and checkov pin conflicting versions of shared dependencies) only where they are not.
#
# resolve_tool NAME PACKAGE VERSION COMMAND prints the command's path, trying in order:
#   1. $TOOLS_DIR/NAME, a virtualenv an earlier run made, if it holds PACKAGE==VERSION;
#   2. COMMAND on PATH, if `COMMAND --version` prints VERSION;
#   3. a new $TOOLS_DIR/NAME with PACKAGE==VERSION from the package index (with $PY313).
# What it chose goes to stderr, so the run says what it installs and what it reuses.

resolve_tool() {
    local name=$1 package=$2 version=$3 command=$4
    local venv="$TOOLS_DIR/$name" found said
    # Each answer is read whole before grep looks at it: under pipefail, `pip show | grep -q`
    # fails when grep stops reading early and pip dies of the closed pipe.
    said=$("$venv/bin/python" -m pip show "$package" 2>/dev/null || true)
    if [ -x "$venv/bin/$command" ] && grep -qx "Version: $version" <<<"$said"; then
        echo "   $package $version: reusing $venv" >&2
        echo "$venv/bin/$command"
        return
    fi
    found=$(command -v "$command" 2>/dev/null || true)
    said=$([ -n "$found" ] && "$found" --version 2>/dev/null || true)
    if [ -n "$found" ] && grep -qw -- "$version" <<<"$said"; then
        echo "   $package $version: using $found from PATH" >&2
        echo "$found"
        return
    fi
    echo "   $package $version: installing into $venv (not found at that version)" >&2
    [ -x "$venv/bin/python" ] || "$PY313" -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$package==$version" >"$TOOLS_DIR/$name.log" 2>&1 || {
        tail -n 20 "$TOOLS_DIR/$name.log" >&2
        return 1
    }
    echo "$venv/bin/$command"
}
