/* What the kernel grants this process: its user namespace and its effective capabilities,
 * read from the kernel (capget, /proc/self/uid_map), never inferred from the uid. */
#include "isolate/privilege.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

bool
xmp_priv_initial_userns(void)
{
    char buf[128];
    unsigned long inner, outer, count;
    int fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return n < 0; /* no /proc: nothing says otherwise */
    buf[n] = '\0';
    /* The initial namespace's map is the one line "0 0 4294967295"; a child namespace's
     * cannot cover the whole range. */
    return sscanf(buf, "%lu %lu %lu", &inner, &outer, &count) == 3 && inner == 0 && outer == 0 &&
           count == 4294967295UL && strchr(buf, '\n') == strrchr(buf, '\n');
}

bool
xmp_priv_has_cap(int cap)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    memset(data, 0, sizeof(data));
    if (cap < 0 || cap >= 32 * _LINUX_CAPABILITY_U32S_3 || syscall(SYS_capget, &hdr, data) < 0)
        return false;
    return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

bool
xmp_priv_admin(void)
{
    return xmp_priv_has_cap(CAP_SYS_ADMIN) && xmp_priv_initial_userns();
}

bool
xmp_priv_root(void)
{
    return xmp_priv_admin() && xmp_priv_has_cap(CAP_DAC_OVERRIDE);
}
