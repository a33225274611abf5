// tests/slurm_test.cc - `troupe slurm` on a real Slurm (Debian's slurmctld, slurmd and
// munge, tools/deps.sh): a controller "ctl" and two compute nodes "n1", "n2", each in
// network namespaces of its own (tools/netns.h: its own address and /tmp) with its own
// hostname (a UTS namespace). The test submits examples/slurm/troupe.sbatch with sbatch and
// waits for it: its cluster_job.py must see both nodes, an actor on each, a gloo allreduce
// across them and an object pulled across. Then it submits the same job made to sleep,
// cancels it mid-run (scancel) and checks that nothing is left: no process in the nodes'
// namespaces but Slurm's own, no job directory in their /tmp. Root only; skips with the
// reason elsewhere or without Slurm. Outside Bazel's sandbox (namespaces, veths).
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"
#include "tools/netns.h"

namespace {

std::string abs_path(const std::string &p) {
    char real[4096];
    return realpath(p.c_str(), real) ? real : "";
}

std::string slurp(const std::string &path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

bool have(const char *prog) {
    std::string cmd = std::string("command -v ") + prog + " >/dev/null 2>&1";
    return system(cmd.c_str()) == 0;
}

class Slurm : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0) {
            skip_why = "not root: Slurm's daemons and the namespaces need it";
            return;
        }
        for (const char *p :
             {"slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sinfo", "munged", "unshare"})
            if (!have(p)) {
                skip_why = std::string("no ") + p + " (Debian's slurmctld, slurmd, " +
                           "slurm-client and munge: tools/deps.sh)";
                return;
            }
        cli = abs_path(g_troupe_cli);
        lib = abs_path("api/libtroupe.so");
        pkg = abs_path("bindings/python");
        example = abs_path("examples/slurm");
        if (cli.empty() || lib.empty() || pkg.empty() || example.empty()) {
            skip_why = "the troupe CLI, libtroupe.so, the Python package or the example is "
                       "missing from the test's files";
            return;
        }
        char why[512];
        if (tr_netns_up(&net, 3, why, sizeof why) != 0) {
            skip_why = why;
            return;
        }
        up = true;
        /* (short: the munge socket's path has a length limit; not /tmp: each node has its
         * own) */
        char tmpl[] = "/var/tmp/trslurm-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        work = tmpl;
        ASSERT_EQ(system(("head -c 1024 /dev/urandom > " + work + "/munge.key && chmod 400 " +
                          work + "/munge.key")
                             .c_str()),
                  0);
        ASSERT_EQ(system(("munged --force --key-file=" + work + "/munge.key --socket=" + work +
                          "/munge.sock --pid-file=" + work + "/munged.pid --log-file=" + work +
                          "/munged.log --seed-file=" + work + "/munged.seed")
                             .c_str()),
                  0)
            << slurp(work + "/munged.log");
        std::ofstream conf(work + "/slurm.conf");
        conf << "ClusterName=troupetest\nSlurmctldHost=ctl(10.213.0.1)\n"
             << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << work
             << "/munge.sock\nSlurmUser=root\nSlurmdUser=root\n"
             << "StateSaveLocation=" << work << "/state\nSlurmdSpoolDir=" << work
             << "/spool-%n\nSlurmctldPidFile=" << work << "/slurmctld.pid\nSlurmdPidFile=" << work
             << "/slurmd-%n.pid\nSlurmctldLogFile=" << work
             << "/slurmctld.log\nSlurmdLogFile=" << work << "/slurmd-%n.log\n"
             << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
             << "SchedulerType=sched/builtin\nSelectType=select/linear\nMpiDefault=none\n"
             << "ReturnToService=2\nJobCompType=jobcomp/none\n"
             << "AccountingStorageType=accounting_storage/none\n"
             << "JobAcctGatherType=jobacct_gather/none\nKillWait=5\nMinJobAge=5\n"
             << "InactiveLimit=0\nMailProg=/bin/true\n"
             << "NodeName=n1 NodeAddr=10.213.0.2 CPUs=2 State=UNKNOWN\n"
             << "NodeName=n2 NodeAddr=10.213.0.3 CPUs=2 State=UNKNOWN\n"
             << "PartitionName=main Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP\n";
        conf.close();
        mkdir((work + "/state").c_str(), 0700);
        /* the job's files, copied (not linked) where every node sees them: a source tree
         * under /tmp (the runfiles link into it) is hidden from the nodes */
        ASSERT_EQ(system(("mkdir -p " + work + "/bin " + work + "/py && cp -L " + cli + " " + work +
                          "/bin/troupe && cp -L " + lib + " " + work + "/libtroupe.so && cp -rL " +
                          pkg + "/troupe " + work + "/py/ && cp -L " + example + "/troupe.sbatch " +
                          example + "/cluster_job.py " + work + "/")
                             .c_str()),
                  0);
        cli = work + "/bin/troupe";
        lib = work + "/libtroupe.so";
        pkg = work + "/py";
        setenv("SLURM_CONF", (work + "/slurm.conf").c_str(), 1);
        std::string out = in(0, "unshare --uts sh -c 'hostname ctl && slurmctld'");
        for (int i = 1; i <= 2; i++) {
            std::string n = "n" + std::to_string(i);
            mkdir((work + "/spool-" + n).c_str(), 0700);
            /* (slurmd 22.05 wants a cgroup v1 tree at /sys/fs/cgroup with a "systemd" one
             * in it, which the node's own /sys lacks: a named hierarchy of its own, empty;
             * proctrack/linuxproc tracks the jobs' processes) */
            out += in(i, "unshare --uts --mount sh -c 'mount --make-rprivate / && "
                         "mount -t tmpfs none /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd && "
                         "mount -t cgroup -o none,name=troupe-slurm-test cgroup "
                         "/sys/fs/cgroup/systemd && hostname " +
                             n + " && slurmd -N " + n + "'");
        }
        for (int t = 0; t < 150; t++) { /* both nodes idle */
            std::string s = in(0, "sinfo -h -o %t");
            if (s.find("idle") != std::string::npos && s.find("unk") == std::string::npos &&
                s.find("down") == std::string::npos && s.find("mix") == std::string::npos)
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        FAIL() << "Slurm did not come up: " << out << in(0, "sinfo") << "\n"
               << slurp(work + "/slurmctld.log") << slurp(work + "/slurmd-n1.log");
    }

    static void TearDownTestSuite() {
        if (!up) return;
        in(0, "scancel --full --quiet -u root");
        for (const char *pid : {"slurmd-n1.pid", "slurmd-n2.pid", "slurmctld.pid", "munged.pid"}) {
            std::string p = slurp(work + "/" + pid);
            if (atoi(p.c_str()) > 0) kill(atoi(p.c_str()), SIGTERM);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        tr_netns_down(&net);
        if (!work.empty() && system(("rm -rf " + work).c_str()) != 0)
            fprintf(stderr, "could not remove %s\n", work.c_str());
    }

    void SetUp() override {
        if (!skip_why.empty()) GTEST_SKIP() << skip_why;
    }

    /* cmd in node i's namespaces (network, mount: its /tmp), with SLURM_CONF */
    static std::string in(int i, const std::string &cmd, int *status = nullptr) {
        char *out = nullptr;
        std::string full = "env SLURM_CONF=" + work + "/slurm.conf sh -c '" + quote(cmd) + "'";
        int st = tr_netns_run(&net, i, full.c_str(), &out);
        std::string s = out ? out : "";
        free(out);
        if (status) *status = st;
        return s;
    }
    static std::string quote(const std::string &s) { /* for inside '...' */
        std::string q;
        for (char c : s)
            q += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return q;
    }
    /* sbatch of the example from the controller, the job's environment the driver's: the
     * troupe CLI and Debian's python3 on PATH, the package from the tree and its library */
    static std::string sbatch(const std::string &opts, const std::string &args, int *st) {
        return in(0,
                  "cd " + work + " && env PATH=" + work + "/bin:/usr/bin:/bin PYTHONPATH=" + pkg +
                      " PYTROUPE_LIBRARY=" + lib + " sbatch --parsable " + opts +
                      " troupe.sbatch " + args,
                  st);
    }
    /* The processes in node i's network namespace other than Slurm's daemons and the
     * namespace's holder: "pid comm" each. */
    static std::vector<std::string> left_in(int i) {
        char link[64], want[128] = "", got[128];
        snprintf(link, sizeof link, "/proc/%d/ns/net", (int)net.inner[i]);
        ssize_t n = readlink(link, want, sizeof want - 1);
        std::vector<std::string> left;
        if (n <= 0) return left;
        want[n] = '\0';
        DIR *d = opendir("/proc");
        while (struct dirent *e = d ? readdir(d) : nullptr) {
            int pid = atoi(e->d_name);
            if (pid <= 0 || pid == net.inner[i]) continue;
            snprintf(link, sizeof link, "/proc/%d/ns/net", pid);
            ssize_t k = readlink(link, got, sizeof got - 1);
            if (k <= 0) continue;
            got[k] = '\0';
            if (strcmp(got, want) != 0) continue;
            std::string comm = slurp("/proc/" + std::to_string(pid) + "/comm");
            while (!comm.empty() && comm.back() == '\n')
                comm.pop_back();
            if (comm == "slurmd" || comm == "slurmctld" || comm == "sleep" || comm == "nsenter")
                continue;
            left.push_back(std::to_string(pid) + " " + comm);
        }
        if (d) closedir(d);
        return left;
    }

    static std::string skip_why, cli, lib, pkg, example, work;
    static tr_netns net;
    static bool up;
};

std::string Slurm::skip_why, Slurm::cli, Slurm::lib, Slurm::pkg, Slurm::example, Slurm::work;
tr_netns Slurm::net;
bool Slurm::up;

TEST_F(Slurm, TheExampleRunsOnAClusterOfTheJobsNodes) {
    int st = -1;
    /* (--wait: sbatch returns once the job has ended, with its exit code) */
    std::string id = sbatch("--wait --output=job-%j.out", "", &st);
    id = id.substr(0, id.find_first_not_of("0123456789"));
    std::string out = slurp(work + "/job-" + id + ".out");
    EXPECT_EQ(st, 0) << id << "\n" << out;
    EXPECT_NE(out.find("troupe slurm: 2 nodes"), std::string::npos) << out;
    EXPECT_NE(out.find("nodes: 2"), std::string::npos) << out;
    EXPECT_NE(out.find("actors on: n1 n2"), std::string::npos) << out;
    EXPECT_NE(out.find("gloo allreduce across 2 nodes: ok"), std::string::npos) << out;
    EXPECT_NE(out.find("object pulled across by n2: ok"), std::string::npos) << out;
    for (int i = 1; i <= 2; i++) {
        std::string tmp = in(i, "ls /tmp");
        EXPECT_EQ(tmp.find("troupe-slurm-"), std::string::npos) << "n" << i << ": " << tmp;
    }
}

TEST_F(Slurm, ACancelledJobLeavesNothingOnAnyNode) {
    int st = -1;
    std::string id = sbatch("--output=job-%j.out", "600", &st);
    ASSERT_EQ(st, 0) << id;
    id = id.substr(0, id.find_first_not_of("0123456789"));
    std::string out;
    for (int t = 0; t < 600 && out.find("sleeping") == std::string::npos; t++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        out = slurp(work + "/job-" + id + ".out");
    }
    ASSERT_NE(out.find("sleeping"), std::string::npos) << "the job did not get going:\n" << out;
    EXPECT_FALSE(left_in(1).empty() || left_in(2).empty()) << "nothing ran on a node";
    EXPECT_NE(in(2, "ls /tmp").find("troupe-slurm-" + id), std::string::npos);
    in(0, "scancel " + id);
    bool gone = false;
    for (int t = 0; t < 300 && !gone; t++) { /* the job leaves the queue, its processes go */
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        gone = in(0, "squeue -h -j " + id + " 2>/dev/null").find(id) == std::string::npos &&
               left_in(1).empty() && left_in(2).empty();
    }
    for (int i = 1; i <= 2; i++) {
        std::string left;
        for (auto &p : left_in(i))
            left += p + "; ";
        EXPECT_TRUE(left.empty()) << "left on n" << i << ": " << left;
        std::string tmp = in(i, "ls /tmp");
        EXPECT_EQ(tmp.find("troupe-slurm-"), std::string::npos) << "n" << i << ": " << tmp;
    }
    out = slurp(work + "/job-" + id + ".out");
    EXPECT_NE(out.find("CANCELLED"), std::string::npos) << out;
}

} // namespace
