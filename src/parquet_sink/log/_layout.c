/* The log's line layout read in one pass of compiled code (see lines.py, whose column-wise reader is the
 * reference this must match: the property tests in tests/log/test_lines_property.py run both).
 *
 * A line in the layout is exactly what Spark's FileStreamSinkLog (json4s) and this package write:
 *
 *   {"path":"P","size":S,"isDir":B,"modificationTime":M,"blockReplication":R,"blockSize":Z,"action":"A"}
 *
 * and, in a compact file this package wrote, ,"batchId":N before the closing brace. P and A are ASCII
 * text (no control character) without a quote or a backslash (no escapes), B is true or false, every number
 * is digits without a sign or a leading zero that fits an int64. parse() answers only for a block whose every line is in the
 * layout, and answers None for anything else (another spacing or key order, an escape, a control character or
 * a byte above 127, a number out of range, an empty line): the caller then reads the block column-wise or with
 * a JSON parser, which report what is wrong. Answering None is never wrong, only slower.
 *
 * The scan holds no Python object and runs without the GIL: the log's blocks are parsed on two threads. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY(s) s, (sizeof(s) - 1)

/* The module trusts no caller: every size is checked before it is computed with (no overflow) and every buffer
 * read or written as int32 or int64 values must be aligned for them, else ValueError. */
static int aligned(const Py_buffer *b, size_t alignment, const char *what) {
    if ((uintptr_t)b->buf % alignment == 0)
        return 1;
    PyErr_Format(PyExc_ValueError, "%s: a buffer not aligned to %zu bytes", what, alignment);
    return 0;
}

typedef struct {
    int32_t *path_offsets;  /* lines + 1 */
    char *path_data;        /* up to the block's size */
    int64_t *size, *mtime, *replication, *block_size, *batch;
    uint8_t *is_dir;        /* a bitmap, Arrow's bit order */
    int32_t *action_offsets;
    char *action_data;      /* action_room bytes */
    Py_ssize_t action_room;
} Columns;

static inline int literal(const char **at, const char *end, const char *text, size_t length) {
    if ((size_t)(end - *at) < length || memcmp(*at, text, length) != 0)
        return 0;
    *at += length;
    return 1;
}

/* Digits as the writer writes a non-negative int64: no sign, no leading zero, at most 19 digits, in range. */
static inline int number(const char **at, const char *end, int64_t *out) {
    const char *p = *at;
    uint64_t value = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (digits == 19)
            return 0;
        value = value * 10 + (uint64_t)(*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || (digits > 1 && **at == '0') || value > (uint64_t)INT64_MAX)
        return 0;
    *out = (int64_t)value;
    *at = p;
    return 1;
}

/* ASCII text (no control character) up to the next quote, no backslash; *at moves past the closing quote. */
static inline int text(const char **at, const char *end, const char **start, Py_ssize_t *length) {
    const char *close = memchr(*at, '"', (size_t)(end - *at));
    unsigned char bad = 0;
    if (close == NULL)
        return 0;
    for (const unsigned char *p = (const unsigned char *)*at; p < (const unsigned char *)close; p++)
        bad |= (unsigned char)((unsigned char)(*p - 32) >= 96) | (unsigned char)(*p == '\\');  /* < 32, > 127 */
    if (bad)
        return 0;
    *start = *at;
    *length = close - *at;
    *at = close + 1;
    return 1;
}

/* Every line of data in the layout: 1, with the columns filled; else 0. */
static int scan(const char *data, Py_ssize_t size, Py_ssize_t lines, int stamped, Columns *c) {
    const char *at = data, *end = data + size, *value;
    Py_ssize_t length, path_used = 0, action_used = 0;
    memset(c->is_dir, 0, (size_t)((lines + 7) / 8));
    c->path_offsets[0] = c->action_offsets[0] = 0;
    for (Py_ssize_t i = 0; i < lines; i++) {
        if (i && !literal(&at, end, KEY("\n")))
            return 0;
        if (!literal(&at, end, KEY("{\"path\":\"")) || !text(&at, end, &value, &length))
            return 0;
        memcpy(c->path_data + path_used, value, (size_t)length);
        path_used += length;
        c->path_offsets[i + 1] = (int32_t)path_used;
        if (!literal(&at, end, KEY(",\"size\":")) || !number(&at, end, &c->size[i]) ||
            !literal(&at, end, KEY(",\"isDir\":")))
            return 0;
        if (literal(&at, end, KEY("true")))
            c->is_dir[i >> 3] |= (uint8_t)(1u << (i & 7));
        else if (!literal(&at, end, KEY("false")))
            return 0;
        if (!literal(&at, end, KEY(",\"modificationTime\":")) || !number(&at, end, &c->mtime[i]) ||
            !literal(&at, end, KEY(",\"blockReplication\":")) || !number(&at, end, &c->replication[i]) ||
            !literal(&at, end, KEY(",\"blockSize\":")) || !number(&at, end, &c->block_size[i]) ||
            !literal(&at, end, KEY(",\"action\":\"")) || !text(&at, end, &value, &length))
            return 0;
        if (length > c->action_room - action_used)
            return 0;
        memcpy(c->action_data + action_used, value, (size_t)length);
        action_used += length;
        c->action_offsets[i + 1] = (int32_t)action_used;
        if (stamped && (!literal(&at, end, KEY(",\"batchId\":")) || !number(&at, end, &c->batch[i])))
            return 0;
        if (!literal(&at, end, KEY("}")))
            return 0;
    }
    return at == end;
}

/* parse(data, lines, stamped, path_offsets, paths, size, is_dir, mtime, replication, block_size, action_offsets,
 * actions, batch) -> None, or (bytes of paths used, bytes of actions used). The columns are written into the
 * writable buffers given (the caller's memory pool reuses them; fresh memory would cost a page fault per 4 KiB):
 * int32 offsets (lines + 1), path data (len(data)), int64 values (lines), isDir as a bitmap in Arrow's bit
 * order ((lines + 7) / 8 bytes), action data (8 bytes a line: a longer action goes the slow way), and batchId
 * (int64 values, or None unless stamped). */
static PyObject *parse(PyObject *module, PyObject *args) {
    enum { OUTPUTS = 9 };
    Py_buffer view, out[OUTPUTS];
    Py_ssize_t lines;
    int stamped, ok, held = 0;
    PyObject *batch, *result = NULL;
    Py_buffer batch_view = {0};
    Columns c;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*npw*w*w*w*w*w*w*w*w*O", &view, &lines, &stamped, &out[0], &out[1], &out[2],
                          &out[3], &out[4], &out[5], &out[6], &out[7], &out[8], &batch))
        return NULL;
    held = OUTPUTS;
    if (lines <= 0 || lines > (PY_SSIZE_T_MAX - 8) / 8) {
        PyErr_SetString(PyExc_ValueError, "parse: lines must be positive and fit the buffers' sizes");
        goto done;
    }
    if (stamped && PyObject_GetBuffer(batch, &batch_view, PyBUF_WRITABLE) < 0)
        goto done;
    static const size_t alignment[OUTPUTS] = {4, 1, 8, 1, 8, 8, 8, 4, 1};
    for (int k = 0; k < OUTPUTS; k++)
        if (!aligned(&out[k], alignment[k], "parse"))
            goto done;
    if (stamped && !aligned(&batch_view, 8, "parse"))
        goto done;
    Py_ssize_t need[OUTPUTS] = {(lines + 1) * 4, view.len, lines * 8, (lines + 7) / 8, lines * 8, lines * 8,
                                lines * 8, (lines + 1) * 4, lines * 8};
    int fits = !stamped || batch_view.len >= lines * 8;
    for (int k = 0; k < OUTPUTS; k++)
        fits = fits && out[k].len >= need[k];
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "parse: a column buffer is too small for the lines");
        goto done;
    }
    if (view.len >= INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    c.path_offsets = (int32_t *)out[0].buf;
    c.path_data = (char *)out[1].buf;
    c.size = (int64_t *)out[2].buf;
    c.is_dir = (uint8_t *)out[3].buf;
    c.mtime = (int64_t *)out[4].buf;
    c.replication = (int64_t *)out[5].buf;
    c.block_size = (int64_t *)out[6].buf;
    c.action_offsets = (int32_t *)out[7].buf;
    c.action_data = (char *)out[8].buf;
    c.action_room = out[8].len;
    c.batch = stamped ? (int64_t *)batch_view.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    ok = scan((const char *)view.buf, view.len, lines, stamped, &c);
    Py_END_ALLOW_THREADS
    result = ok ? Py_BuildValue("(ii)", c.path_offsets[lines], c.action_offsets[lines]) : Py_NewRef(Py_None);
done:
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&out[k]);
    if (batch_view.obj != NULL)
        PyBuffer_Release(&batch_view);
    PyBuffer_Release(&view);
    return result;
}

/* newlines(data) -> the positions of every newline in data, as int32 values in a bytes object. */
static PyObject *newlines(PyObject *module, PyObject *args) {
    Py_buffer view;
    int32_t *found = NULL;
    Py_ssize_t count = 0, room = 0;
    int failed = 0;
    PyObject *result = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (view.len >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "newlines: data of 2 GiB or more");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const char *at = (const char *)view.buf, *end = at + view.len, *hit;
    while (at < end && (hit = memchr(at, '\n', (size_t)(end - at))) != NULL) {
        if (count == room) {
            room = room ? 2 * room : 4096;
            int32_t *grown = realloc(found, (size_t)room * sizeof(int32_t));
            if (grown == NULL) {
                failed = 1;
                break;
            }
            found = grown;
        }
        found[count++] = (int32_t)(hit - (const char *)view.buf);
        at = hit + 1;
    }
    Py_END_ALLOW_THREADS
    result = failed ? PyErr_NoMemory() : PyBytes_FromStringAndSize((const char *)found, count * (Py_ssize_t)sizeof(int32_t));
done:
    free(found);
    PyBuffer_Release(&view);
    return result;
}

/* stamp(framed, starts, text, out) -> None: each line of framed (line i from starts[i], int32, to the next
 * start or the end) written to out with text before its last byte, as Arrow's binary_replace_slice(-1, -1)
 * does; out holds len(framed) + len(starts) * len(text) bytes. */
static PyObject *stamp(PyObject *module, PyObject *args) {
    Py_buffer framed, starts, text, out;
    PyObject *result = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &framed, &starts, &text, &out))
        return NULL;
    Py_ssize_t lines = starts.len / (Py_ssize_t)sizeof(int32_t);
    const int32_t *start = (const int32_t *)starts.buf;
    if (starts.len % (Py_ssize_t)sizeof(int32_t) != 0 || !aligned(&starts, sizeof(int32_t), "stamp") ||
        (text.len > 0 && lines > (PY_SSIZE_T_MAX - framed.len) / text.len)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "stamp: starts must be whole int32 values, and the output's size fit");
        goto done;
    }
    int valid = out.len == framed.len + lines * text.len && (lines == 0 || start[0] == 0);
    for (Py_ssize_t i = 1; valid && i < lines; i++)
        valid = start[i - 1] <= start[i] && start[i] <= framed.len;
    if (!valid) {
        PyErr_SetString(PyExc_ValueError, "stamp: line starts out of order or an output of the wrong size");
    } else {
        Py_BEGIN_ALLOW_THREADS
        const char *from = (const char *)framed.buf;
        char *to = (char *)out.buf;
        for (Py_ssize_t i = 0; i < lines; i++) {
            Py_ssize_t length = (i + 1 < lines ? start[i + 1] : framed.len) - start[i];
            Py_ssize_t head = length ? length - 1 : 0;
            memcpy(to, from + start[i], (size_t)head);
            memcpy(to + head, text.buf, (size_t)text.len);
            memcpy(to + head + text.len, from + start[i] + head, (size_t)(length - head));
            to += length + text.len;
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&framed);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&text);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(data, lines, stamped, *columns) -> the columns of a block whose every line is in the log's layout "
     "(written into the buffers given), else None"},
    {"newlines", newlines, METH_VARARGS, "newlines(data) -> the positions of its newlines (int32 values, as bytes)"},
    {"stamp", stamp, METH_VARARGS, "stamp(framed, starts, text, out) -> None: text before each line's last byte"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_layout", .m_doc = NULL, .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__layout(void) { return PyModule_Create(&module); }
