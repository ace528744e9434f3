"""Row chords: a splat's alpha >= 1/255 region described pixel row by pixel row, and the tests that read
it (which rows of a tile, and whether a tile at all, a splat can reach).

The region is the union of a conic region, whose chord on the row of centre y has centre
x_c(y) = XC1 y + XC0 and squared half-width x_c^2 - (Q2 y^2 + Q1 y + Q0), and a disc |q - m|^2 <= LEVEL
around (MX, MY), inside the y range [YMIN, YMAX]. BOUNDED 0 marks a conic region that is no ellipse
(every row reachable). One float64 row [ROWS] per splat with the R_* columns below; who makes them says
what the region is (the surfels: ``rasterizer.surfels.cpu_kernels.pack_surfels``, the exact term's
ellipse u^2 + v^2 <= 2 ln(255 o) and the low-pass disc).

The compositing kernels visit a splat's rows of a tile that ``row_reaches`` keeps (``tile_rows``); the
tile binning (``binning.count_or_fill_tiles``) keeps a (tile, splat) pair when the tile's column is
among those ``band_columns`` finds for its tile row: where the splat's ellipse (``chord_ellipse``, the
chords in centred form) or disc meets the band of the row's pixel centres (the rows row_reaches takes
by its rounding tolerance included), widened by ``chord_pad`` (the rows' margin and the kernels'
fast-math rounding). A band holds its rows, so the binning keeps every pair of which the kernels would
composite a row: dropping the others changes no output bit.
"""

from __future__ import annotations

import math

from numba import njit

R_YMIN, R_YMAX, R_XC1, R_XC0, R_Q2, R_Q1, R_Q0, R_MX, R_MY, R_LEVEL, R_BOUNDED = range(11)
ROWS = 11
ROW_MARGIN = 1e-2  # pixels added to each row's chord (float32 rounding of sigma stays inside)
ROW_TOL = 1e-9  # row_chord takes a row whose squared half-width is >= -ROW_TOL (1 + x_c^2) (rounding)
TOL_PAD = 1e-6  # pixels added in y to the rows chord_ellipse finds row_reaches takes


@njit(cache=True, inline="always")
def pixel_span(lo, hi, p0, p1):
    """Pixels [a, b) of [p0, p1) whose centres p + 0.5 lie in [lo, hi]."""
    a = p0
    if lo > p0 + 0.5:
        a = p1 if lo - 0.5 >= p1 else int(math.ceil(lo - 0.5))
    b = p1
    if hi < p1 - 0.5:
        b = p0 if hi - 0.5 < p0 else int(math.floor(hi - 0.5)) + 1
    return a, max(a, b)


@njit(cache=True, inline="always")
def row_chord(rows, g, y):
    """(x_c, hw2, taken): the centre and squared half-width of splat g's conic chord on the row of centre
    y, and whether the row has one (hw2 >= -ROW_TOL (1 + x_c^2): rounding of a zero width tolerated)."""
    xc = rows[g, R_XC1] * y + rows[g, R_XC0]
    hw2 = xc * xc - ((rows[g, R_Q2] * y + rows[g, R_Q1]) * y + rows[g, R_Q0])
    return xc, hw2, hw2 >= -ROW_TOL * (1.0 + xc * xc)


@njit(cache=True, inline="always")
def row_reaches(rows, g, y, mid, half):
    """Whether splat g's alpha can reach 1/255 at a pixel centre of the row of centre y within half of
    mid (the tile's centres): its conic chord or its disc's |q - m|^2 <= level, widened by ROW_MARGIN,
    meets [mid - half, mid + half]. No sqrt, no division; True for a conic region that is no ellipse."""
    if rows[g, R_BOUNDED] == 0.0:
        return True
    xc, hw2, taken = row_chord(rows, g, y)
    gap = abs(xc - mid) - half - ROW_MARGIN  # from the chord's centre to the nearest centre of the tile
    if taken and (gap <= 0.0 or gap * gap <= hw2):
        return True
    dy = y - rows[g, R_MY]
    rest = rows[g, R_LEVEL] - dy * dy
    gap = abs(rows[g, R_MX] - mid) - half - ROW_MARGIN
    return rest >= 0.0 and (gap <= 0.0 or gap * gap <= rest)


@njit(cache=True, inline="always")
def reached_rows(rows, g, ylo, yhi, x0, x1):
    """[ylo, yhi) without the rows at either end that splat g cannot reach (row_reaches) within the
    tile's pixel centres x0 + 0.5 .. x1 - 0.5."""
    mid, half = 0.5 * (x0 + x1), 0.5 * (x1 - x0 - 1)
    while ylo < yhi and not row_reaches(rows, g, ylo + 0.5, mid, half):
        ylo += 1
    while yhi > ylo and not row_reaches(rows, g, yhi - 0.5, mid, half):
        yhi -= 1
    return ylo, yhi


@njit(cache=True, inline="always")
def tile_rows(rows, g, x0, y0, x1, y1):
    """The rows [ylo, yhi) of the tile of pixels [x0, x1) x [y0, y1) that splat g can reach: those of its
    y range (pixel_span) less the ends it cannot (reached_rows). Empty: g reaches no pixel of the tile."""
    ylo, yhi = pixel_span(rows[g, R_YMIN], rows[g, R_YMAX], y0, y1)
    return reached_rows(rows, g, ylo, yhi, x0, x1)


CHORD_PAD = ROW_MARGIN + 1e-6  # pixels band_columns widens chords by, at least (chord_pad): row_reaches' margin
ELLIPSE_RTOL = 1e-12  # chord_ellipse: a y^2 coefficient not below -this x its terms' size is no ellipse


@njit(cache=True, inline="always")
def chord_ellipse(rows, g):
    """Splat g's conic region in centred form, for whole-band tests: on row y its chord is
    (x - x_c(y))^2 <= h(y), x_c = XC1 y + XC0 and h(y) = x_c^2 - (Q2 y^2 + Q1 y + Q0) = A y^2 + B y + C; with
    ye = -B / (2 A), xe = x_c(ye), level = h(ye) = C - B^2 / (4 A) and dy = y - ye that is
    x_c = xe + XC1 dy, h = level + A dy^2, an ellipse when A < 0 (and level >= 0). Over dy its chord's
    right end xe + XC1 dy + sqrt(h) is concave with its maximum at dy_r = XC1 sqrt(level / (A (A - XC1^2))),
    its left end convex with its minimum at -dy_r, and h >= 0 for |dy| <= half_h = sqrt(level / -A).
    row_reaches also takes rows with h >= -ROW_TOL (1 + x_c^2) (rounding), there as the point x_c: a
    quadratic in y too, whose dy interval [t_lo, t_hi] (widened by TOL_PAD) holds [-half_h, half_h].
    Returns (xe, ye, XC1, A, level, dy_r, half_h, t_lo, t_hi, bounded); bounded False for a region that
    is no ellipse, or nearly none (that quadratic's y^2 coefficient within ELLIPSE_RTOL of 0: its roots
    are ill-conditioned)."""
    xc1, xc0 = rows[g, R_XC1], rows[g, R_XC0]
    A = xc1 * xc1 - rows[g, R_Q2]
    B = 2.0 * xc1 * xc0 - rows[g, R_Q1]
    C = xc0 * xc0 - rows[g, R_Q0]
    At = A + ROW_TOL * xc1 * xc1  # h + ROW_TOL (1 + x_c^2) = At y^2 + Bt y + Ct
    Bt = B + 2.0 * ROW_TOL * xc1 * xc0
    Ct = C + ROW_TOL * (1.0 + xc0 * xc0)
    if rows[g, R_BOUNDED] == 0.0 or not At < -ELLIPSE_RTOL * (xc1 * xc1 + abs(rows[g, R_Q2])):
        return 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0, -1.0, False
    ye = -B / (2.0 * A)
    level = max(C - B * B / (4.0 * A), 0.0)  # < 0: an empty ellipse (no chord but tolerated points)
    disc = Bt * Bt - 4.0 * At * Ct
    if disc < 0.0:  # no row is taken
        t_lo, t_hi = 1.0, -1.0
    else:
        mid, half = -Bt / (2.0 * At) - ye, math.sqrt(disc) / (-2.0 * At)
        t_lo, t_hi = mid - half - TOL_PAD, mid + half + TOL_PAD
    return (xc1 * ye + xc0, ye, xc1, A, level, xc1 * math.sqrt(level / (A * (A - xc1 * xc1))),
            math.sqrt(level / -A), t_lo, t_hi, True)


@njit(cache=True, inline="always")
def column_range(lo, hi, ts, W):
    """(a, b): the tile columns a..b (inclusive; empty when b < a) having a pixel centre in [lo, hi];
    column tx's centres run from tx ts + 0.5 to min(tx ts + ts, W) - 0.5."""
    if not (lo <= hi and lo <= W - 0.5 and hi >= 0.5):
        return 0, -1
    lo, hi = max(lo, -1.0), min(hi, W + 1.0)  # no overflow in the conversions below
    return int(math.ceil((lo + 0.5) / ts)) - 1, int(math.floor((hi - 0.5) / ts))


@njit(cache=True, inline="always")
def row_chord_extent(rows, g, ylo, yhi):
    """(lo, hi): the least and greatest x of splat g's conic chords on the pixel rows [ylo, yhi) that have
    one (row_chord's test); lo > hi when none has. Row by row, for conic regions chord_ellipse cannot put
    in centred form."""
    lo, hi = math.inf, -math.inf
    for yi in range(ylo, yhi):
        xc, hw2, taken = row_chord(rows, g, yi + 0.5)
        if taken:
            hw = math.sqrt(max(hw2, 0.0))
            lo, hi = min(lo, xc - hw), max(hi, xc + hw)
    return lo, hi


@njit(cache=True, inline="always")
def chord_pad(W, ts):
    """Pixels band_columns widens every chord by on an image W wide: CHORD_PAD and sqrt(ROW_TOL (1 + x^2))
    at x = W + ts, the most by which the kernels' squared half-widths (fast-math, fused multiply-adds)
    may exceed the binning's where they are near 0 (a chord end that matters lies within a tile of the
    image), as a half-width: 0.06 px at W = 2000."""
    x = W + ts
    return CHORD_PAD + math.sqrt(ROW_TOL * (1.0 + x * x))


@njit(cache=True, inline="always")
def ellipse_band_extent(ell, lo, hi):
    """(left, right): the least and greatest x of the chords of the ellipse ``ell`` (chord_ellipse) on the
    rows dy in [lo, hi] (dy = y - ye) that row_reaches takes; left > right when none. Within
    |dy| <= half_h the chord ends' extremes lie at the clamped dy_r and -dy_r; on the rows taken beyond
    (t_lo <= dy <= t_hi) the chord is the point x_c, linear in dy, so the hull includes x_c at the ends
    of [lo, hi] within [t_lo, t_hi]."""
    xe, ye, xc1, A, level, dy_r, half_h, t_lo, t_hi, bounded = ell
    lo, hi = max(lo, t_lo), min(hi, t_hi)
    if lo > hi:
        return 1.0, -1.0
    left, right = min(xe + xc1 * lo, xe + xc1 * hi), max(xe + xc1 * lo, xe + xc1 * hi)
    elo, ehi = max(lo, -half_h), min(hi, half_h)
    if elo <= ehi:
        dr = min(max(dy_r, elo), ehi)
        dl = min(max(-dy_r, elo), ehi)
        right = max(right, xe + xc1 * dr + math.sqrt(max(level + A * dr * dr, 0.0)))
        left = min(left, xe + xc1 * dl - math.sqrt(max(level + A * dl * dl, 0.0)))
    return left, right


@njit(cache=True, inline="always")
def band_columns(rows, g, ell, y0, y1, ts, W, pad):
    """The tile columns in which splat g can reach a pixel centre of the pixel rows [y0, y1), as two
    ranges (ellipse a, b, disc a, b; inclusive, empty when b < a): the x extents over the band of its
    pixel-centre rows in g's y range (pixel_span) of its ellipse (``ell``: chord_ellipse; its chord ends
    at the clamped extreme rows; chords of no ellipse: row_chord_extent; no chords: every column) and of
    its disc, widened by ``pad`` (chord_pad: at least row_reaches' margin). The band holds its rows, so
    every column where row_reaches keeps a row is in one range; a few more may be (a band's ellipse can
    pass between rows)."""
    ylo, yhi = pixel_span(rows[g, R_YMIN], rows[g, R_YMAX], y0, y1)
    if ylo >= yhi:
        return 0, -1, 0, -1
    rlo, rhi = ylo + 0.5, yhi - 0.5
    if rows[g, R_BOUNDED] == 0.0:  # every row reachable (row_reaches)
        ea, eb = 0, W // ts + 1
    elif not ell[-1]:  # chords of no ellipse (chord_ellipse's bounded False): the rows' own extremes
        lo, hi = row_chord_extent(rows, g, ylo, yhi)
        ea, eb = column_range(lo - pad, hi + pad, ts, W)
    else:
        left, right = ellipse_band_extent(ell, rlo - ell[1], rhi - ell[1])
        ea, eb = column_range(left - pad, right + pad, ts, W)
    dy = min(max(rows[g, R_MY], rlo), rhi) - rows[g, R_MY]
    rest = rows[g, R_LEVEL] - dy * dy
    if rest < 0.0:
        return ea, eb, 0, -1
    r = math.sqrt(rest) + pad
    da, db = column_range(rows[g, R_MX] - r, rows[g, R_MX] + r, ts, W)
    return ea, eb, da, db
