# device_env.sh: sourced on a machine that lacks the build's libraries (the lent GPU machine has
# CUDA, NCCL and MPI but no CMocka, cJSON or data set). It unpacks the Debian packages carried in
# .carry/debs into a private prefix (never into /), points pkg-config and the loader at it only
# for the libraries the system lacks, and names the carried Fashion-MNIST.
#   here:  fill .carry/: debs (apt-get download libcjson1 libcjson-dev libcmocka0 libcmocka-dev zlib1g-dev
#          libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libopenblas0 pkgconf pkgconf-bin libpkgconf3
#          libgfortran5 libquadmath0, in .carry/debs), data (the four Fashion-MNIST .gz files, in .carry/data),
#          cudnn-include (cp /usr/local/cuda/include/cudnn*.h)
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
# cuDNN's headers, where the machine has its library but not its headers
[ -d "$_dp_root/cudnn-include" ] && [ ! -e /usr/local/cuda/include/cudnn.h ] && export CUDNN_INCLUDE_DIR="$_dp_root/cudnn-include"
unset _dp_root _dp_pre _dp_pc
