/* The `xmprun plan` JSON object (SPEC.md section 2): job, host, workers, with keys in a fixed
 * order so that output can be diffed and read by people. */
#include "runner/plan/plan.h"

#include <stdio.h>

static json_t *
json_string_or_null(const char *s)
{
    return s != NULL && s[0] != '\0' ? json_string(s) : json_null();
}

static json_t *
json_int_or_null(int64_t v)
{
    return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static json_t *
cpulist_json(const cpu_set_t *set)
{
    char buf[4096];

    xmp_cpulist_format(set, buf, sizeof(buf));
    return json_string(buf);
}

static const char *
start_name(enum xmp_start_mode start)
{
    switch (start) {
    case XMP_START_EXEC:
        return "exec";
    case XMP_START_FORK:
        return "fork";
    }
    return "exec";
}

static json_t *
job_json(const struct xmp_plan *plan)
{
    json_t *job = json_object();
    json_t *limits = json_object();

    json_object_set_new(job, "name", json_string(plan->job_name));
    json_object_set_new(job, "id", json_string(plan->job_id));
    json_object_set_new(job, "kind", json_string(xmp_device_kind_name(plan->kind)));
    json_object_set_new(job, "world_size", json_integer(plan->world_size));
    json_object_set_new(job, "local_world_size", json_integer(plan->local_world_size));
    json_object_set_new(job, "nnodes", json_integer(plan->nnodes));
    json_object_set_new(job, "node_rank", json_integer(plan->node_rank));
    json_object_set_new(job, "master_addr", json_string(plan->master_addr));
    json_object_set_new(job, "master_port", json_integer(plan->master_port));
    json_object_set_new(job, "run_id", json_string(plan->run_id));
    json_object_set_new(job, "cgroup", json_string(plan->cgroup_name));
    json_object_set_new(job, "workdir", json_string(plan->workdir));
    json_object_set_new(job, "report", json_string(plan->report_path));
    json_object_set_new(job, "run_dir", json_string(plan->run_dir));
    json_object_set_new(job, "start", json_string(start_name(plan->spec->start)));
    json_object_set_new(limits, "memory", json_int_or_null(plan->job_limits.memory));
    json_object_set_new(job, "limits", limits);
    {
        json_t *warnings = json_array();
        for (char **w = plan->warnings; w != NULL && *w != NULL; w++)
            json_array_append_new(warnings, json_string(*w));
        json_object_set_new(job, "warnings", warnings);
    }
    return job;
}

static json_t *
device_json(const struct xmp_device *d)
{
    json_t *o = json_object();

    json_object_set_new(o, "kind", json_string(xmp_device_kind_name(d->kind)));
    json_object_set_new(o, "index", json_integer(d->index));
    json_object_set_new(o, "uuid", json_string_or_null(d->uuid));
    json_object_set_new(o, "pci", json_string_or_null(d->pci));
    json_object_set_new(o, "model", json_string_or_null(d->model));
    json_object_set_new(o, "numa_node", json_int_or_null(d->numa_node));
    json_object_set_new(o, "local_cpus", cpulist_json(&d->local_cpus));
    if (d->dev_major >= 0 && d->dev_minor >= 0) {
        char node[32];
        snprintf(node, sizeof(node), "%d:%d", d->dev_major, d->dev_minor);
        json_object_set_new(o, "node", json_string(node));
    } else {
        json_object_set_new(o, "node", json_null());
    }
    return o;
}

static json_t *
host_json(const struct xmp_host *host)
{
    json_t *o = json_object();
    json_t *devices = json_array();

    json_object_set_new(o, "hostname", json_string(host->hostname));
    json_object_set_new(o, "cpus", cpulist_json(&host->allowed));
    json_object_set_new(o, "ncpus", json_integer(host->ncpus));
    json_object_set_new(o, "numa_nodes", json_integer(host->numa_nodes));
    for (size_t i = 0; i < host->n_gpus; i++)
        json_array_append_new(devices, device_json(&host->gpus[i]));
    for (size_t i = 0; i < host->n_tpus; i++)
        json_array_append_new(devices, device_json(&host->tpus[i]));
    json_object_set_new(o, "devices", devices);
    return o;
}

static json_t *
strv_json(char *const *v)
{
    json_t *a = json_array();

    for (; v != NULL && *v != NULL; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}

static json_t *
worker_json(const struct xmp_plan_worker *w)
{
    json_t *o = json_object();
    json_t *limits = json_object();
    json_t *env = json_object();

    json_object_set_new(o, "rank", json_integer(w->rank));
    json_object_set_new(o, "local_rank", json_integer(w->local_rank));
    json_object_set_new(o, "devices", strv_json(w->devices));
    json_object_set_new(o, "cpuset", json_string_or_null(w->cpuset));
    json_object_set_new(limits, "memory", json_int_or_null(w->limits.memory));
    json_object_set_new(limits, "memory_high", json_int_or_null(w->limits.memory_high));
    json_object_set_new(limits, "swap", json_int_or_null(w->limits.swap));
    json_object_set_new(limits, "cpus",
                        w->limits.cpus_milli > 0 ? json_real((double)w->limits.cpus_milli / 1000.0)
                                                 : json_null());
    json_object_set_new(limits, "pids", json_int_or_null(w->limits.pids));
    /* isolation.devices: what the worker may open, as rules (v1 devices.allow syntax) and, by
     * name, the device nodes beyond the ordinary ones: its accelerators (job: all of the job's on
     * this node), their shared nodes and the RDMA ones. */
    if (w->limits.has_devices) {
        json_t *devs = json_array(), *nodes = json_array();
        for (size_t i = 0; i < w->limits.devices.n; i++) {
            const struct xmp_dev_rule *r = &w->limits.devices.r[i];
            char rule[64];
            xmp_devices_format(r, rule, sizeof(rule));
            json_array_append_new(devs, json_string(rule));
            if (r->what[0] != '\0')
                json_array_append_new(nodes, json_string(r->what));
        }
        json_object_set_new(limits, "devices", devs);
        json_object_set_new(limits, "device_nodes", nodes);
    } else {
        json_object_set_new(limits, "devices", json_null());
        json_object_set_new(limits, "device_nodes", json_null());
    }
    json_object_set_new(o, "limits", limits);
    /* w->env is sorted by name already. */
    for (size_t i = 0; i < w->env_len; i++)
        json_object_set_new(env, w->env[i].name, json_string(w->env[i].value));
    json_object_set_new(o, "env", env);
    json_object_set_new(o, "argv", strv_json(w->argv));
    json_object_set_new(o, "stdout", json_string_or_null(w->stdout_path));
    json_object_set_new(o, "stderr", json_string_or_null(w->stderr_path));
    json_object_set_new(o, "error_file", json_string_or_null(w->error_file));
    return o;
}

json_t *
xmp_plan_to_json(const struct xmp_plan *plan, const struct xmp_host *host)
{
    json_t *root = json_object();
    json_t *workers = json_array();

    json_object_set_new(root, "job", job_json(plan));
    json_object_set_new(root, "host", host_json(host));
    for (size_t i = 0; i < plan->n_workers; i++)
        json_array_append_new(workers, worker_json(&plan->workers[i]));
    json_object_set_new(root, "workers", workers);
    return root;
}
