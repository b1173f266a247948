#!/usr/bin/env bash
# Throwaway certificates for tenantqos's mutual TLS, with Debian's openssl: for the demo, the
# testbed and the tests (production certificates come from your PKI, e.g. cert-manager).
#
#   tq-certs.sh ca DIR NAME                      a self-signed CA: DIR/NAME.crt, DIR/NAME.key
#   tq-certs.sh issue DIR CA NAME CN [GROUP...] [--san SAN,...] [--days N]
#                                                a certificate for CN with O=GROUP each, signed
#                                                by DIR/CA.{crt,key}: DIR/NAME.crt, DIR/NAME.key
#   tq-certs.sh cluster DIR SERVER_IP NODE...    ca, policyd (SAN IP:SERVER_IP, localhost),
#                                                admin, viewer and one agent cert per NODE
# Groups are the roles (tenantqos:admins, tenantqos:viewers, tenantqos:agents); an agent's CN
# is its node name. --days -1 makes an already expired certificate (for tests). Keys are
# P-256, mode 0600.
set -euo pipefail

usage() { sed -n '4,13p' "$0" >&2; exit 2; }

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

cmd_ca() {
  local dir=$1 name=$2
  mkdir -p "$dir"
  newkey "$dir/$name.key"
  openssl req -x509 -new -key "$dir/$name.key" -out "$dir/$name.crt" -days 30 \
    -subj "/CN=$name" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

cmd_issue() {
  local dir=$1 ca=$2 name=$3 cn=$4
  shift 4
  local subj="" san="" days=30
  while (($#)); do
    case $1 in
      --san) san=$2; shift 2 ;;
      --days) days=$2; shift 2 ;;
      *) subj+="/O=$1"; shift ;;
    esac
  done
  subj+="/CN=$cn"
  newkey "$dir/$name.key"
  local ext
  ext=$(mktemp)
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [[ -n $san ]] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new -key "$dir/$name.key" -subj "$subj" 2>/dev/null |
    openssl x509 -req -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" -CAcreateserial \
      -days "$days" -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$ext"
}

cmd_cluster() {
  local dir=$1 ip=$2
  shift 2
  cmd_ca "$dir" ca
  cmd_issue "$dir" ca policyd tenantqos-policyd --san "IP:$ip,DNS:localhost,IP:127.0.0.1"
  cmd_issue "$dir" ca admin admin tenantqos:admins
  cmd_issue "$dir" ca viewer viewer tenantqos:viewers
  for node in "$@"; do cmd_issue "$dir" ca "agent-$node" "$node" tenantqos:agents; done
}

(($# >= 1)) || usage
case $1 in
  ca) (($# == 3)) || usage; cmd_ca "$2" "$3" ;;
  issue) (($# >= 5)) || usage; shift; cmd_issue "$@" ;;
  cluster) (($# >= 3)) || usage; shift; cmd_cluster "$@" ;;
  *) usage ;;
esac
