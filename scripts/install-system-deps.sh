#!/usr/bin/env bash
# Install the Debian packages the test suite needs: OpenSSH server (a real sshd
# on loopback stands in for a board), adb (the real tool, against a device
# stand-in) and Chromium (the HTML report is loaded in a real headless browser).
# Idempotent; needs root (or passwordless sudo) on Debian/Ubuntu.
set -euo pipefail
need=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v adb >/dev/null 2>&1 || need+=(adb)
# Debian names the browser `chromium`; Ubuntu's apt has only `chromium-browser`.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    need+=(chromium)
fi
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if ! $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
    [[ " ${need[*]} " == *" chromium "* ]] || exit 1
    echo "no 'chromium' package here; trying 'chromium-browser'"
    need=("${need[@]/#chromium/chromium-browser}")
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
