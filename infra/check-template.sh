#!/usr/bin/env bash
# Offline checks of template.yaml and the SAM build, each tool in its own virtualenv
# (aws-sam-cli and checkov pin conflicting versions of shared dependencies):
#   sam validate --lint, sam validate --region, cfn-lint, checkov --skip-download (each for
#   Endpoint=HttpApi and Endpoint=FunctionUrl), sam build,
#   then an inspection of the build (layer precompiled for 3.13, aarch64 binaries only, the same
#   distribution versions as the test environment, no dependencies in functions).
# Needs python3.13 (the Lambda runtime's version) and make; no Docker, no AWS account.
# TEST_PYTHON: the interpreter the tests run with (default: the active virtualenv's, else .venv's).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR=${TOOLS_DIR:-.venv-tools}
REGION=${AWS_REGION:-us-east-1}
export SAM_CLI_TELEMETRY=0

find_python313() {
    # pyenv shims exist for every installed version but fail unless it is selected: only take
    # an interpreter that runs, and hand out its real path (sam build searches PATH for it).
    if python3.13 -c '' >/dev/null 2>&1; then python3.13 -c 'import sys; print(sys.executable)'; return; fi
    if command -v pyenv >/dev/null 2>&1; then
        local version
        version=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.|$)' | tail -n1 || true)
        if [ -n "$version" ] && [ -x "$(pyenv prefix "$version")/bin/python3.13" ]; then
            echo "$(pyenv prefix "$version")/bin/python3.13"; return
        fi
    fi
    echo "python3.13 not found: sam build needs the Lambda runtime's Python on PATH" >&2
    return 1
}

if [ -z "${TEST_PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ]; then TEST_PYTHON="$VIRTUAL_ENV/bin/python"; else TEST_PYTHON=.venv/bin/python; fi
fi
if ! "$TEST_PYTHON" -c '' >/dev/null 2>&1; then
    echo "no test environment at $TEST_PYTHON: set TEST_PYTHON (the layer is compared with it)" >&2
    exit 1
fi

PY313=$(find_python313)
# sam build looks up python3.13 on PATH, and the layer Makefile compiles with it.
export PATH="$(dirname "$PY313"):$PATH"
echo "== python for sam build: $("$PY313" --version) at $PY313"

install_tool() {  # install_tool NAME PIP-SPEC...
    local name=$1; shift
    if [ ! -x "$TOOLS_DIR/$name/bin/python" ]; then
        "$PY313" -m venv "$TOOLS_DIR/$name"
    fi
    "$TOOLS_DIR/$name/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

echo "== installing tools into $TOOLS_DIR/ (one virtualenv each)"
mkdir -p "$TOOLS_DIR"
pids=()
install_tool sam aws-sam-cli >"$TOOLS_DIR/sam.log" 2>&1 & pids+=($!)
install_tool checkov checkov >"$TOOLS_DIR/checkov.log" 2>&1 & pids+=($!)
install_tool cfn-lint cfn-lint >"$TOOLS_DIR/cfn-lint.log" 2>&1 & pids+=($!)
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
if [ "$failed" -ne 0 ]; then
    tail -n 20 "$TOOLS_DIR"/*.log >&2
    exit 1
fi
SAM="$TOOLS_DIR/sam/bin/sam"
echo "   $("$SAM" --version); checkov $("$TOOLS_DIR/checkov/bin/checkov" --version); $("$TOOLS_DIR/cfn-lint/bin/cfn-lint" --version)"

# Offline: no credentials are needed, and none may be used.
export AWS_ACCESS_KEY_ID=offline AWS_SECRET_ACCESS_KEY=offline AWS_DEFAULT_REGION="$REGION"
unset AWS_PROFILE AWS_SESSION_TOKEN

# Both endpoints (parameter Endpoint) and both networks (VpcId): the template as it is (HttpApi,
# the stack's own network), a copy whose Endpoint default is FunctionUrl, and a copy whose
# defaults name an existing VPC, since checkov judges conditional resources by the defaults.
VARIANT=$(mktemp ./.template-FunctionUrl.XXXXXX.yaml)
EXISTING_VPC=$(mktemp ./.template-ExistingVpc.XXXXXX.yaml)
trap 'rm -f "$VARIANT" "$EXISTING_VPC"' EXIT
sed '/^  Endpoint:$/,/^  [A-Za-z]/ s/^    Default: HttpApi$/    Default: FunctionUrl/' template.yaml >"$VARIANT"
if ! grep -q '^    Default: FunctionUrl$' "$VARIANT"; then
    echo "could not make the FunctionUrl variant: Endpoint's default is no longer 'HttpApi'" >&2
    exit 1
fi
sed -e '/^  VpcId:$/,/^  [A-Za-z]/ s/^    Default: ""$/    Default: vpc-0123456789abcdef0/' \
    -e '/^  SubnetIds:$/,/^  [A-Za-z]/ s/^    Default: ""$/    Default: subnet-0123456789abcdef0,subnet-0fedcba9876543210/' \
    -e '/^  PrivateRouteTableIds:$/,/^  [A-Za-z]/ s/^    Default: ""$/    Default: rtb-0123456789abcdef0/' \
    template.yaml >"$EXISTING_VPC"
if [ "$(grep -c -e '^    Default: vpc-0' -e '^    Default: subnet-0' -e '^    Default: rtb-0' "$EXISTING_VPC")" -ne 3 ]; then
    echo "could not make the existing-VPC variant: VpcId, SubnetIds or PrivateRouteTableIds no longer default to empty" >&2
    exit 1
fi
for TEMPLATE in template.yaml "$VARIANT" "$EXISTING_VPC"; do
    echo "==== $(awk '/^  Endpoint:$/{f=1} f && /^    Default:/{print "Endpoint=" $2; exit}' "$TEMPLATE"), $(awk '/^  VpcId:$/{f=1} f && /^    Default:/{print "VpcId=" $2; exit}' "$TEMPLATE") ($TEMPLATE)"
    echo "== sam validate --lint";            "$SAM" validate --lint --template "$TEMPLATE"
    echo "== sam validate --region $REGION";  "$SAM" validate --region "$REGION" --template "$TEMPLATE"
    echo "== cfn-lint";                       "$TOOLS_DIR/cfn-lint/bin/cfn-lint" "$TEMPLATE"
    echo "== checkov"
    "$TOOLS_DIR/checkov/bin/checkov" -f "$TEMPLATE" --framework cloudformation --skip-download \
        --quiet --compact
done
echo "== sam build"
"$SAM" build --template template.yaml --build-dir .aws-sam/build
echo "== inspecting the build"
"$PY313" infra/inspect_build.py .aws-sam/build --test-python "$TEST_PYTHON"
