/* svg_png.h: an SVG document rasterized to a PNG file (librsvg and cairo), for --plot F.png: the
 * plot is drawn once, as SVG, and a PNG is that drawing rendered. Built only with librsvg
 * (dp_config.h: DP_HAVE_RSVG); without it the call fails saying how to get it. */
#ifndef DP_SVG_PNG_H
#define DP_SVG_PNG_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* Renders svg (len bytes) at `scale` times its size onto white, as PNG into out; `path` names the
 * file in messages. */
dp_status dp_svg_to_png(const char *svg, size_t len, double scale, FILE *out, const char *path);
/* 1 if this build can write PNG. */
int dp_png_supported(void);

#endif
