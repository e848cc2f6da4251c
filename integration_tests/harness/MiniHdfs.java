// HDFS for the file sink's tests: Hadoop's MiniDFSCluster (a NameNode and one DataNode, the
// real servers in one JVM), every port on 127.0.0.1, WebHDFS on the port given.
// Usage: java -cp <hadoop-client-minicluster jars> MiniHdfs.java <base dir> <http port>
// Prints "MINIHDFS READY <http port>" once it serves; SIGTERM shuts it down. Started again
// on a base directory that exists, it keeps the files (a NameNode restart).
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public final class MiniHdfs {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
    conf.setBoolean("dfs.permissions.enabled", true);
    int httpPort = Integer.parseInt(args[1]);
    // A base directory that exists holds a cluster killed before: start it again as it was.
    boolean fresh = !new java.io.File(args[0]).exists();
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf)
            .format(fresh)
            .numDataNodes(1)
            .nameNodePort(0)
            .nameNodeHttpPort(httpPort)
            .build();
    cluster.waitActive();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    System.out.println("MINIHDFS READY " + cluster.getNameNode().getHttpAddress().getPort());
    System.out.flush();
    Thread.currentThread().join();
  }
}
