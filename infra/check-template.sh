#!/usr/bin/env bash
# Offline checks of template.yaml and the SAM build, each tool in its own virtualenv
# (aws-sam-cli and checkov pin conflicting versions of shared dependencies):
#   sam validate --lint, sam validate --region, cfn-lint, checkov --skip-download (each for
#   Endpoint=HttpApi and Endpoint=FunctionUrl, an existing VPC, and the two Aurora choices),
#   sam build,
#   then an inspection of the build (layer precompiled for 3.13, aarch64 binaries only, the same
#   distribution versions as the test environment, no dependencies in functions).
# Needs python3.13 (the Lambda runtime's version) and make; no Docker, no AWS account.
# TEST_PYTHON: the interpreter the tests run with (default: the active virtualenv's, else .venv's).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR=${TOOLS_DIR:-.venv-tools}
REGION=${AWS_REGION:-us-east-1}
export SAM_CLI_TELEMETRY=0

if [ -z "${TEST_PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ]; then TEST_PYTHON="$VIRTUAL_ENV/bin/python"; else TEST_PYTHON=.venv/bin/python; fi
fi
if ! "$TEST_PYTHON" -c '' >/dev/null 2>&1; then
    echo "no test environment at $TEST_PYTHON: set TEST_PYTHON (the layer is compared with it)" >&2
    exit 1
fi

# The real interpreter, not a pyenv shim (which runs only while its version is selected): the same
# lookup `make dev` and `webhook-inbox invoke` use. sam build needs it on PATH.
PY313=$("$TEST_PYTHON" tools/webhook_inbox_tools/find_python.py 3.13)
# sam build looks up python3.13 on PATH, and the layer Makefile compiles with it.
export PATH="$(dirname "$PY313"):$PATH"
echo "== python for sam build: $("$PY313" --version) at $PY313"

# shellcheck source=infra/tools.sh
. infra/tools.sh
echo "== template tools (reused at their pinned versions, else installed into $TOOLS_DIR/)"
mkdir -p "$TOOLS_DIR"
# NAME PACKAGE VERSION COMMAND: the versions these checks were written against. Resolved in
# parallel: three fresh installs take as long as the slowest one.
pids=()
for pin in "sam aws-sam-cli 1.170.0 sam" "checkov checkov 3.3.30 checkov" \
    "cfn-lint cfn-lint 1.58.0 cfn-lint"; do
    # shellcheck disable=SC2086  # the pin is four words on purpose
    set -- $pin
    resolve_tool "$@" >"$TOOLS_DIR/$1.path" & pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
SAM=$(cat "$TOOLS_DIR/sam.path")
CHECKOV=$(cat "$TOOLS_DIR/checkov.path")
CFN_LINT=$(cat "$TOOLS_DIR/cfn-lint.path")
echo "   $("$SAM" --version); checkov $("$CHECKOV" --version); $("$CFN_LINT" --version)"

# Offline: no credentials are needed, and none may be used.
export AWS_ACCESS_KEY_ID=offline AWS_SECRET_ACCESS_KEY=offline AWS_DEFAULT_REGION="$REGION"
unset AWS_PROFILE AWS_SESSION_TOKEN

# Both endpoints (parameter Endpoint), both networks (VpcId) and the Aurora choices
# (DatabaseEngine): the template as it is (HttpApi, the stack's own network, RDS PostgreSQL), a
# copy whose Endpoint default is FunctionUrl, a copy whose defaults name an existing VPC, one
# whose defaults are Aurora Serverless v2 pausing without RDS Proxy (own network) and one of
# provisioned Aurora behind RDS Proxy in an existing VPC, since checkov judges conditional
# resources by the defaults.
VARIANT=$(mktemp ./.template-FunctionUrl.XXXXXX.yaml)
EXISTING_VPC=$(mktemp ./.template-ExistingVpc.XXXXXX.yaml)
AURORA_PAUSED=$(mktemp ./.template-AuroraPaused.XXXXXX.yaml)
AURORA_EXISTING_VPC=$(mktemp ./.template-AuroraExistingVpc.XXXXXX.yaml)
trap 'rm -f "$VARIANT" "$EXISTING_VPC" "$AURORA_PAUSED" "$AURORA_EXISTING_VPC"' EXIT
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
sed -e '/^  DatabaseEngine:$/,/^  [A-Za-z]/ s/^    Default: postgres$/    Default: aurora-serverless-v2/' \
    -e '/^  CreateDatabaseProxy:$/,/^  [A-Za-z]/ s/^    Default: "true"$/    Default: "false"/' \
    -e '/^  EncryptionKey:$/,/^  [A-Za-z]/ s/^    Default: customer-managed$/    Default: aws-managed/' \
    template.yaml >"$AURORA_PAUSED"
sed -e '/^  DatabaseEngine:$/,/^  [A-Za-z]/ s/^    Default: postgres$/    Default: aurora-postgresql/' \
    -e '/^  DatabaseInstanceClass:$/,/^  [A-Za-z]/ s/^    Default: db.t4g.small$/    Default: db.t4g.medium/' \
    "$EXISTING_VPC" >"$AURORA_EXISTING_VPC"
if [ "$(grep -c -e '^    Default: aurora-serverless-v2$' -e '^    Default: "false"$' "$AURORA_PAUSED")" -lt 2 ] ||
    ! grep -q '^    Default: aws-managed$' "$AURORA_PAUSED" ||
    [ "$(grep -c -e '^    Default: aurora-postgresql$' -e '^    Default: db.t4g.medium$' "$AURORA_EXISTING_VPC")" -ne 2 ]; then
    echo "could not make the Aurora variants: DatabaseEngine, CreateDatabaseProxy, EncryptionKey or DatabaseInstanceClass changed their defaults" >&2
    exit 1
fi
for TEMPLATE in template.yaml "$VARIANT" "$EXISTING_VPC" "$AURORA_PAUSED" "$AURORA_EXISTING_VPC"; do
    echo "==== $(awk '/^  Endpoint:$/{f=1} f && /^    Default:/{print "Endpoint=" $2; exit}' "$TEMPLATE"), $(awk '/^  VpcId:$/{f=1} f && /^    Default:/{print "VpcId=" $2; exit}' "$TEMPLATE"), $(awk '/^  DatabaseEngine:$/{f=1} f && /^    Default:/{print "DatabaseEngine=" $2; exit}' "$TEMPLATE"), $(awk '/^  EncryptionKey:$/{f=1} f && /^    Default:/{print "EncryptionKey=" $2; exit}' "$TEMPLATE") ($TEMPLATE)"
    echo "== sam validate --lint";            "$SAM" validate --lint --template "$TEMPLATE"
    echo "== sam validate --region $REGION";  "$SAM" validate --region "$REGION" --template "$TEMPLATE"
    echo "== cfn-lint";                       "$CFN_LINT" "$TEMPLATE"
    echo "== checkov"
    "$CHECKOV" -f "$TEMPLATE" --framework cloudformation --skip-download \
        --quiet --compact
done
echo "== sam build"
"$SAM" build --template template.yaml --build-dir .aws-sam/build
echo "== inspecting the build"
"$PY313" infra/inspect_build.py .aws-sam/build --test-python "$TEST_PYTHON"
