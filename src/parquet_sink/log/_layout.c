/* The log's line layout read in one pass of compiled code (see lines.py, whose column-wise reader is the
 * reference this must match: the property tests in tests/log/test_lines_property.py run both).
 *
 * A line in the layout is exactly what Spark's FileStreamSinkLog (json4s) and this package write:
 *
 *   {"path":"P","size":S,"isDir":B,"modificationTime":M,"blockReplication":R,"blockSize":Z,"action":"A"}
 *
 * and, in a compact file this package wrote, ,"batchId":N before the closing brace. P and A are ASCII
 * text (no control character) without a quote or a backslash (no escapes), B is true or false, every number is digits without a
 * sign or a leading zero that fits an int64. parse() answers only for a block whose every line is in the
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

static PyObject *bytes_of(Py_ssize_t size) { return PyBytes_FromStringAndSize(NULL, size); }

/* parse(data, lines, stamped) -> None, or the columns as bytes: (path offsets (int32), path data, size,
 * isDir (a bitmap), modificationTime, blockReplication, blockSize (int64), action offsets, action data,
 * batchId (int64, or None unless stamped)). */
static PyObject *parse(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lines;
    int stamped, ok;
    PyObject *out[10] = {NULL}, *result = NULL;
    Columns c;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*np", &view, &lines, &stamped))
        return NULL;
    if (lines <= 0 || view.len >= INT32_MAX) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Py_ssize_t action_room = lines * 8;  /* "add" and "delete" fit; a longer action goes the slow way */
    Py_ssize_t sizes[10] = {(lines + 1) * 4, view.len, lines * 8, (lines + 7) / 8, lines * 8, lines * 8,
                            lines * 8, (lines + 1) * 4, action_room, stamped ? lines * 8 : 0};
    for (int k = 0; k < 10; k++) {
        if (k == 9 && !stamped) {
            out[k] = Py_NewRef(Py_None);
        } else if ((out[k] = bytes_of(sizes[k])) == NULL) {
            goto done;
        }
    }
    c.path_offsets = (int32_t *)PyBytes_AS_STRING(out[0]);
    c.path_data = PyBytes_AS_STRING(out[1]);
    c.size = (int64_t *)PyBytes_AS_STRING(out[2]);
    c.is_dir = (uint8_t *)PyBytes_AS_STRING(out[3]);
    c.mtime = (int64_t *)PyBytes_AS_STRING(out[4]);
    c.replication = (int64_t *)PyBytes_AS_STRING(out[5]);
    c.block_size = (int64_t *)PyBytes_AS_STRING(out[6]);
    c.action_offsets = (int32_t *)PyBytes_AS_STRING(out[7]);
    c.action_data = PyBytes_AS_STRING(out[8]);
    c.batch = stamped ? (int64_t *)PyBytes_AS_STRING(out[9]) : NULL;
    c.action_room = action_room;
    Py_BEGIN_ALLOW_THREADS
    ok = scan((const char *)view.buf, view.len, lines, stamped, &c);
    Py_END_ALLOW_THREADS
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (_PyBytes_Resize(&out[1], c.path_offsets[lines]) < 0 ||
        _PyBytes_Resize(&out[8], c.action_offsets[lines]) < 0)
        goto done;
    result = PyTuple_New(10);
    if (result != NULL) {
        for (int k = 0; k < 10; k++) {
            PyTuple_SET_ITEM(result, k, out[k]);
            out[k] = NULL;
        }
    }
done:
    for (int k = 0; k < 10; k++)
        Py_XDECREF(out[k]);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(data, lines, stamped) -> the columns of a block whose every line is in the log's layout, else None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_layout", .m_doc = NULL, .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__layout(void) { return PyModule_Create(&module); }
