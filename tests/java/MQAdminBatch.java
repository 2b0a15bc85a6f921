import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.commons.cli.CommandLine;
import org.apache.commons.cli.DefaultParser;
import org.apache.commons.cli.Options;
import org.apache.rocketmq.srvutil.ServerUtil;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.SubCommand;

/**
 * Several mqadmin commands in one JVM (a test helper: each mqadmin JVM costs 4-5 s, most of it
 * start-up and the client's shutdown wait). Arguments: the commands, each as mqadmin would
 * take it, separated by "--next". Each command runs as MQAdminStartup.main0 does (same option
 * parsing, same SubCommand.execute), in the given order, on its own thread whose System.out
 * and System.err are captured apart; a command starts once the previous one has printed its
 * outcome, so their requests reach the NameServer in order. Output: per command, a line "@@MQADMIN-BATCH i outLen errLen"
 * then the two captured texts (UTF-8 byte lengths).
 */
public class MQAdminBatch extends MQAdminStartup {
    private static final ThreadLocal<ByteArrayOutputStream> OUT = new ThreadLocal<>();
    private static final ThreadLocal<ByteArrayOutputStream> ERR = new ThreadLocal<>();

    /** A stream that writes to the calling thread's capture, else to `fallback`. */
    private static PrintStream routed(ThreadLocal<ByteArrayOutputStream> local, PrintStream fallback) {
        return new PrintStream(new OutputStream() {
            private OutputStream sink() {
                ByteArrayOutputStream captured = local.get();
                return captured != null ? captured : fallback;
            }

            @Override
            public void write(int b) throws java.io.IOException {
                sink().write(b);
            }

            @Override
            public void write(byte[] b, int off, int len) throws java.io.IOException {
                sink().write(b, off, len);
            }
        }, true, StandardCharsets.UTF_8);
    }

    private static SubCommand find(String name) {
        for (SubCommand cmd : SUB_COMMANDS) {
            if (cmd.commandName().equals(name)) {
                return cmd;
            }
        }
        return null;
    }

    /** One command, as main0 runs it (the ACL hook is null: no tools.yml here). */
    private static void runOne(String[] args) throws Exception {
        SubCommand cmd = find(args[0]);
        if (cmd == null) {
            throw new IllegalArgumentException("no mqadmin command " + args[0]);
        }
        Options options = ServerUtil.buildCommandlineOptions(new Options());
        String[] sub = Arrays.copyOfRange(args, 1, args.length);
        CommandLine line = ServerUtil.parseCmdLine(
            "mqadmin " + cmd.commandName(), sub, cmd.buildCommandlineOptions(options), new DefaultParser());
        if (line == null) {
            throw new IllegalArgumentException("bad arguments for " + args[0]);
        }
        if (line.hasOption('n')) {
            System.setProperty("rocketmq.namesrv.addr", line.getOptionValue('n'));
        }
        cmd.execute(line, options, null);
    }

    public static void main(String[] args) {
        try {
            runAll(args);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0); // client threads that outlive their command must not hold the JVM
    }

    private static void runAll(String[] args) throws Exception {
        List<String[]> commands = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String arg : args) {
            if (arg.equals("--next")) {
                commands.add(current.toArray(new String[0]));
                current = new ArrayList<>();
            } else {
                current.add(arg);
            }
        }
        commands.add(current.toArray(new String[0]));
        initCommand(); // once, before the threads: SUB_COMMANDS is a plain ArrayList

        PrintStream realOut = System.out;
        System.setOut(routed(OUT, realOut));
        System.setErr(routed(ERR, System.err));
        ExecutorService pool = Executors.newFixedThreadPool(commands.size());
        List<Future<byte[][]>> results = new ArrayList<>();
        for (String[] command : commands) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            Future<byte[][]> result = pool.submit(() -> {
                OUT.set(out);
                ERR.set(err);
                try {
                    runOne(command);
                } catch (Throwable t) {
                    t.printStackTrace();
                }
                return new byte[][] {out.toByteArray(), err.toByteArray()};
            });
            results.add(result);
            // Each command names its client instance after System.currentTimeMillis(), and two
            // started together would share one client (the second fails to start). So the next
            // one starts once this one printed its outcome: only the ~3 s shutdowns overlap.
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (out.size() == 0 && err.size() == 0 && !result.isDone()
                && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            Thread.sleep(2);
        }
        for (int i = 0; i < results.size(); i++) {
            byte[][] captured = results.get(i).get();
            realOut.printf("@@MQADMIN-BATCH %d %d %d%n", i, captured[0].length, captured[1].length);
            realOut.write(captured[0]);
            realOut.write(captured[1]);
        }
        realOut.flush();
    }
}
