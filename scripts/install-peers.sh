#!/usr/bin/env bash
# Installs the benchmark's peers from Debian's packages when missing:
# Pushpin, and Nginx with the Nchan module. Neither is started as a service.
set -euo pipefail
missing=()
command -v pushpin >/dev/null 2>&1 || missing+=(pushpin)
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
[ -e /usr/lib/nginx/modules/ngx_nchan_module.so ] || missing+=(libnginx-mod-nchan)
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]}"
  sudo_=""
  [ "$(id -u)" -ne 0 ] && sudo_=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
    $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq "${missing[@]}"
  }
fi
