# Sourced by the install scripts: apt_install TAG PACKAGE... installs those not installed yet.
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  local tag=$1 pkg missing=()
  shift
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[$tag] apt packages: ${missing[*]}"
    # waits for another apt run (another install, unattended upgrades) instead of failing at once
    sudo_if_needed apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
  fi
}
