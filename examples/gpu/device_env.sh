# device_env.sh: sourced on a machine that lacks the build's libraries (the lent GPU machine has
# CUDA, NCCL and MPI but no CMocka, cJSON or data set). It unpacks the Debian packages carried in
# .carry/debs into a private prefix (never into /), points pkg-config and the loader at it only
# for the libraries the system lacks, and names the carried Fashion-MNIST.
#   here:  bash examples/gpu/carry.sh      (fills .carry/: debs and the four .gz files)
#   there: . examples/gpu/device_env.sh && cmake -B build ... && ctest --test-dir build -L cuda
_dp_root=$(pwd)/.carry
_dp_pre=/tmp/dp-prefix
if [ -d "$_dp_root/debs" ]; then
    mkdir -p "$_dp_pre"
    for f in "$_dp_root"/debs/*.deb; do dpkg -x "$f" "$_dp_pre"; done
    # the packages' .pc files name /usr; make them name the prefix
    find "$_dp_pre" -name '*.pc' -exec sed -i -E "s#(=|-L|-I)/usr/#\\1$_dp_pre/usr/#g" {} +
    _dp_pc="$_dp_pre/usr/lib/x86_64-linux-gnu/pkgconfig:$_dp_pre/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig"
    command -v pkg-config >/dev/null 2>&1 || export PATH="$_dp_pre/usr/bin:$PATH"
    export PKG_CONFIG_PATH="${PKG_CONFIG_PATH:+$PKG_CONFIG_PATH:}$_dp_pc"
    export LD_LIBRARY_PATH="$_dp_pre/usr/lib/x86_64-linux-gnu:$_dp_pre/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -d "$_dp_root/data" ] && export DP_FASHION_DIR="$_dp_root/data"
unset _dp_root _dp_pre _dp_pc
