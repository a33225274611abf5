/* tools/links_alone.c - main() of the link checks (//tools:links_alone_*): a layer linked
 * whole (its libraries are alwayslink) with nothing above it must leave no symbol
 * undefined, i.e. it calls nothing of a higher layer. Links, runs, exits 0. */
int main(void) {
    return 0;
}
