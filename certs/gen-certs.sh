#!/bin/sh
# Creates a CA and a serving certificate for digest-gate's Service, for
# clusters that use certs.mode=external (or for running the binary locally).
#
#   certs/gen-certs.sh [--service NAME] [--namespace NS] [--out DIR] [--days N]
#
# Writes DIR/ca.crt, DIR/ca.key, DIR/tls.crt, DIR/tls.key and prints the
# caBundle (base64 of ca.crt) for the webhook configurations.
set -eu

service=digest-gate
namespace=digest-gate
out=./certs/out
days=825

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --service) service=${2:?--service needs a value}; shift 2 ;;
        --namespace) namespace=${2:?--namespace needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --days) days=${2:?--days needs a value}; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done

case "$days" in
    ''|*[!0-9]*) echo "--days must be a whole number" >&2; exit 2 ;;
esac
command -v openssl >/dev/null 2>&1 || { echo "openssl is required" >&2; exit 1; }

mkdir -p "$out"
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fqdn="$service.$namespace.svc"
cat > "$work/server.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $fqdn
[ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$service, DNS:$service.$namespace, DNS:$fqdn, DNS:$fqdn.cluster.local, DNS:localhost, IP:127.0.0.1, IP:::1
CNF

# The CA lives longer than the certificate so a renewal keeps caBundle valid.
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$out/ca.key" -out "$out/ca.crt" -days $((days * 4)) \
    -subj "/CN=digest-gate CA ($namespace)" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$out/tls.key" -out "$work/server.csr" -config "$work/server.cnf" 2>/dev/null

openssl x509 -req -in "$work/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -CAserial "$work/ca.srl" -out "$out/tls.crt" -days "$days" \
    -extfile "$work/server.cnf" -extensions ext 2>/dev/null

openssl verify -CAfile "$out/ca.crt" "$out/tls.crt" >/dev/null
chmod 600 "$out/ca.key" "$out/tls.key"
chmod 644 "$out/ca.crt" "$out/tls.crt"

echo "wrote $out/ca.crt $out/tls.crt $out/tls.key (for $fqdn, localhost, 127.0.0.1, ::1)" >&2
echo "create the Secret:  kubectl -n $namespace create secret tls ${service}-tls --cert=$out/tls.crt --key=$out/tls.key" >&2
echo "caBundle:" >&2
base64 < "$out/ca.crt" | tr -d '\n'
echo
