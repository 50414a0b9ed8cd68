/* svg_png.c: --plot F.png through librsvg (svg_png.h). */
#include "report/svg_png.h"

#include "dp_config.h"

#if DP_HAVE_RSVG
#include <cairo.h>
#include <errno.h>
#include <string.h>
#include <librsvg/rsvg.h>

int dp_png_supported(void) { return 1; }

static cairo_status_t to_file(void *closure, const unsigned char *data, unsigned int length) {
    return fwrite(data, 1, length, (FILE *)closure) == length ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

dp_status dp_svg_to_png(const char *svg, size_t len, double scale, FILE *out, const char *path) {
    GError *err = NULL;
    RsvgHandle *h = rsvg_handle_new_from_data((const guint8 *)svg, len, &err);
    if (!h) {
        dp_status s = dp_fail(DP_ERR_INTERNAL, "--plot %s: the plot's SVG does not parse: %s", path,
                              err ? err->message : "unknown error");
        if (err) g_error_free(err);
        return s;
    }
    gdouble w = 0, hgt = 0;
    if (!rsvg_handle_get_intrinsic_size_in_pixels(h, &w, &hgt) || w <= 0 || hgt <= 0) {
        g_object_unref(h);
        return dp_fail(DP_ERR_INTERNAL, "--plot %s: the plot's SVG has no size in pixels", path);
    }
    const int W = (int)(w * scale + 0.5), H = (int)(hgt * scale + 0.5);
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    cairo_t *cr = cairo_create(surf);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    const RsvgRectangle viewport = {0, 0, W, H};
    dp_status s = DP_OK;
    if (!rsvg_handle_render_document(h, cr, &viewport, &err)) {
        s = dp_fail(DP_ERR_INTERNAL, "--plot %s: rendering the plot failed: %s", path, err ? err->message : "unknown");
        if (err) g_error_free(err);
    }
    cairo_status_t cs = cairo_status(cr);
    if (s == DP_OK && cs != CAIRO_STATUS_SUCCESS)
        s = dp_fail(DP_ERR_INTERNAL, "--plot %s: drawing failed: %s", path, cairo_status_to_string(cs));
    if (s == DP_OK && (cs = cairo_surface_write_to_png_stream(surf, to_file, out)) != CAIRO_STATUS_SUCCESS)
        s = cs == CAIRO_STATUS_WRITE_ERROR ? dp_fail(DP_ERR_IO, "--plot %s: writing the PNG failed: %s", path, strerror(errno))
                                           : dp_fail(DP_ERR_INTERNAL, "--plot %s: encoding the PNG failed: %s", path,
                                                     cairo_status_to_string(cs));
    cairo_destroy(cr);
    cairo_surface_destroy(surf);
    g_object_unref(h);
    return s;
}
#else
int dp_png_supported(void) { return 0; }

dp_status dp_svg_to_png(const char *svg, size_t len, double scale, FILE *out, const char *path) {
    (void)svg, (void)len, (void)scale, (void)out;
    return dp_fail(DP_ERR_UNSUPPORTED, "--plot %s: this build writes SVG only (install librsvg2-dev and rebuild for "
                                       "PNG, or name the file .svg)", path);
}
#endif
