#!/usr/bin/env bash
# Writes a kubeconfig for a tenant cluster behind a client-certificate front.
#
#   scripts/tenant-kubeconfig.sh --server https://tenant.example:6443 \
#     --ca ca.crt --cert client.crt --key client.key [--namespace ci] [--out kubeconfig]
#
# The certificates are embedded, so the kubeconfig stands on its own. The
# server's certificate is always verified against --ca.
set -euo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "tenant-kubeconfig: $*" >&2; exit 2; }

server="" ca="" cert="" key="" namespace="default" out="kubeconfig" name="tenant"
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server="${2:-}"; shift 2 ;;
    --ca) ca="${2:-}"; shift 2 ;;
    --cert) cert="${2:-}"; shift 2 ;;
    --key) key="${2:-}"; shift 2 ;;
    --namespace) namespace="${2:-}"; shift 2 ;;
    --name) name="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    -h|--help) usage ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ -n "$server" ] || die "--server is required, e.g. https://tenant.example:6443"
case "$server" in https://*) ;; *) die "--server $server must be an https:// URL" ;; esac
for pair in "ca:$ca" "cert:$cert" "key:$key"; do
  flag="${pair%%:*}" file="${pair#*:}"
  [ -n "$file" ] || die "--$flag is required"
  [ -e "$file" ] || die "--$flag $file does not exist"
  [ -r "$file" ] || die "--$flag $file is not readable"
  [ -s "$file" ] || die "--$flag $file is empty"
done
grep -q "BEGIN CERTIFICATE" "$ca" || die "--ca $ca is not a PEM certificate"
grep -q "BEGIN CERTIFICATE" "$cert" || die "--cert $cert is not a PEM certificate"
grep -q "PRIVATE KEY" "$key" || die "--key $key is not a PEM private key"

# The client certificate as the runner's TLS library will judge it:
# rustls takes only X.509 v3 (kubectl takes v1 too, so a v1 certificate
# works there and fails in the runner), and a key that is not the
# certificate's, or an expired certificate, fails only at the first call.
reissue="reissue it as X.509 v3, e.g. openssl x509 -req -in user.csr -CA ca.crt -CAkey ca.key -days 365 -out user.crt -extfile <(printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth'), or through the cluster's CertificateSigningRequest API (kubectl certificate approve)"
if command -v openssl >/dev/null; then
  text=$(openssl x509 -in "$cert" -noout -text 2>/dev/null) || die "--cert $cert is not a certificate openssl can read"
  version=$(printf '%s\n' "$text" | sed -n 's/^ *Version: *\([0-9]*\).*/\1/p' | head -1)
  [ "$version" = 3 ] || die "--cert $cert is X.509 v${version:-?}; the runner accepts only X.509 v3 client certificates: $reissue"
  cert_key=$(openssl x509 -in "$cert" -noout -pubkey 2>/dev/null)
  key_pub=$(openssl pkey -in "$key" -pubout 2>/dev/null) || die "--key $key is not a private key openssl can read"
  [ "$cert_key" = "$key_pub" ] || die "--key $key is not the key of --cert $cert: give the key the certificate was issued for"
  openssl x509 -in "$cert" -noout -checkend 0 >/dev/null || die "--cert $cert expired ($(openssl x509 -in "$cert" -noout -enddate | cut -d= -f2)): $reissue"
else
  echo "tenant-kubeconfig: no openssl here, so --cert's version, key and expiry are not checked" >&2
fi

b64() { base64 -w0 < "$1"; }
umask 077
cat > "$out" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: $server
    certificate-authority-data: $(b64 "$ca")
contexts:
- name: $name
  context:
    cluster: $name
    user: $name
    namespace: $namespace
current-context: $name
users:
- name: $name
  user:
    client-certificate-data: $(b64 "$cert")
    client-key-data: $(b64 "$key")
KUBECONFIG
echo "tenant-kubeconfig: wrote $out (context $name, namespace $namespace)" >&2
