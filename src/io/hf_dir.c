#include "io/hf_dir.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/hf_config.h"

typedef struct {
  const char *name; /* owned by its file */
  int file;
} entry;

struct dsp_hf_dir {
  char *path;
  dsp_st_file **files;
  int nfiles;
  entry *e;         /* sorted by name */
  int n;
};

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

void dsp_hf_dir_close(dsp_hf_dir *d) {
  if (!d) return;
  for (int i = 0; i < d->nfiles; i++) dsp_st_close(d->files[i]);
  free(d->files);
  free(d->e);
  free(d->path);
  free(d);
}

/* The shard file names of the index, in the order first named (unique). */
static dsp_status index_files(const char *dir, const char *text, char ***names, int *n, json_t **map) {
  json_error_t err;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!root) return dsp_fail(DSP_ERR_FORMAT, "%s/model.safetensors.index.json: %s (line %d)", dir, err.text, err.line);
  json_t *wm = json_object_get(root, "weight_map");
  if (!json_is_object(wm) || json_object_size(wm) == 0) {
    json_decref(root);
    return dsp_fail(DSP_ERR_FORMAT, "%s/model.safetensors.index.json: no 'weight_map' object", dir);
  }
  size_t cap = json_object_size(wm);
  char **out = calloc(cap, sizeof *out);
  int k = 0;
  const char *key;
  json_t *v;
  dsp_status s = out ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "%s: out of memory", dir);
  json_object_foreach(wm, key, v) {
    if (s != DSP_OK) break;
    if (!json_is_string(v) || strchr(json_string_value(v), '/') || !strcmp(json_string_value(v), "..")) {
      s = dsp_fail(DSP_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map['%.200s'] is not a file name in the "
                                   "directory", dir, key);
      break;
    }
    int seen = 0;
    for (int i = 0; i < k && !seen; i++) seen = !strcmp(out[i], json_string_value(v));
    if (!seen) out[k++] = (char *)json_string_value(v);
  }
  if (s != DSP_OK) {
    free(out);
    json_decref(root);
    return s;
  }
  *names = out;
  *n = k;
  *map = root;
  return DSP_OK;
}

static dsp_status open_files(dsp_hf_dir *d, char **names, int n, json_t *index) {
  d->files = calloc((size_t)n, sizeof *d->files);
  if (!d->files) return dsp_fail(DSP_ERR_NOMEM, "%s: out of memory", d->path);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", d->path, names[i]);
    DSP_TRY(dsp_st_open(p, &d->files[i]));
    d->nfiles = i + 1;
    total += (size_t)dsp_st_count(d->files[i]);
  }
  d->e = calloc(total ? total : 1, sizeof *d->e);
  if (!d->e) return dsp_fail(DSP_ERR_NOMEM, "%s: out of memory", d->path);
  for (int i = 0; i < n; i++)
    for (int t = 0; t < dsp_st_count(d->files[i]); t++) d->e[d->n++] = (entry){dsp_st_name(d->files[i], t), i};
  qsort(d->e, (size_t)d->n, sizeof *d->e, cmp_entry);
  for (int i = 1; i < d->n; i++)
    if (!strcmp(d->e[i].name, d->e[i - 1].name))
      return dsp_fail(DSP_ERR_FORMAT, "%s: tensor '%.200s' is in two files (%s and %s)", d->path, d->e[i].name,
                      dsp_st_path(d->files[d->e[i - 1].file]), dsp_st_path(d->files[d->e[i].file]));
  if (!index) return DSP_OK;
  /* the index and the files must agree in both directions */
  json_t *wm = json_object_get(index, "weight_map");
  const char *key;
  json_t *v;
  json_object_foreach(wm, key, v) {
    entry probe = {key, 0}, *hit = bsearch(&probe, d->e, (size_t)d->n, sizeof *d->e, cmp_entry);
    if (!hit)
      return dsp_fail(DSP_ERR_MISSING, "%s: the index names tensor '%.200s' in %s, which does not hold it", d->path,
                      key, json_string_value(v));
    const char *f = dsp_st_path(d->files[hit->file]);
    const char *base = strrchr(f, '/');
    if (strcmp(base ? base + 1 : f, json_string_value(v)))
      return dsp_fail(DSP_ERR_FORMAT, "%s: the index puts tensor '%.200s' in %s, but %s holds it", d->path, key,
                      json_string_value(v), f);
  }
  if ((size_t)d->n != json_object_size(wm))
    return dsp_fail(DSP_ERR_FORMAT, "%s: the shards hold %d tensors, the index lists %zu", d->path, d->n,
                    json_object_size(wm));
  return DSP_OK;
}

dsp_status dsp_hf_dir_open(const char *dir, dsp_hf_dir **out) {
  *out = NULL;
  dsp_hf_dir *d = calloc(1, sizeof *d);
  if (!d || !(d->path = strdup(dir))) {
    free(d);
    return dsp_fail(DSP_ERR_NOMEM, "%s: out of memory", dir);
  }
  char ip[4096];
  snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
  FILE *probe = fopen(ip, "rb");
  dsp_status s;
  if (probe) {
    fclose(probe);
    char *text = NULL, **names = NULL;
    int n = 0;
    json_t *index = NULL;
    s = dsp_read_text(ip, &text, NULL);
    if (s == DSP_OK) s = index_files(dir, text, &names, &n, &index);
    if (s == DSP_OK) s = open_files(d, names, n, index);
    free(names);
    json_decref(index);
    free(text);
  } else {
    char *one = "model.safetensors";
    s = open_files(d, &one, 1, NULL);
  }
  if (s != DSP_OK) {
    dsp_hf_dir_close(d);
    return s;
  }
  *out = d;
  return DSP_OK;
}

dsp_status dsp_hf_dir_find(const dsp_hf_dir *d, const char *name, dsp_st_file **f) {
  entry probe = {name, 0};
  const entry *hit = bsearch(&probe, d->e, (size_t)d->n, sizeof *d->e, cmp_entry);
  if (!hit) return dsp_fail(DSP_ERR_MISSING, "%s: tensor '%s' is missing", d->path, name);
  *f = d->files[hit->file];
  return DSP_OK;
}

int dsp_hf_dir_count(const dsp_hf_dir *d) { return d->n; }
const char *dsp_hf_dir_name(const dsp_hf_dir *d, int i) { return i >= 0 && i < d->n ? d->e[i].name : NULL; }
const char *dsp_hf_dir_path(const dsp_hf_dir *d) { return d->path; }
