// Stands in for LocalStack's ddb-local-loader agent (it patches DynamoDB Local to allow more
// than 20 GSIs; the catalog needs one). LocalStack passes -javaagent:<jar>, so a jar must exist.
public final class NoopAgent {
    public static void premain(String arguments, java.lang.instrument.Instrumentation inst) {}
}
